"""The store's versioned schema: each migration moves ``PRAGMA user_version`` up by one."""

from __future__ import annotations

MIGRATIONS: tuple[str, ...] = (
    # 1: sessions, task records, the durable notification queue, process records. Process
    # identities are (pid, start in seconds since boot, boot id): see process/identity.py.
    """
    CREATE TABLE sessions (
        id          TEXT PRIMARY KEY,
        pid         INTEGER NOT NULL,
        pid_start   REAL NOT NULL,
        boot_id     TEXT NOT NULL DEFAULT '',
        cwd         TEXT NOT NULL DEFAULT '',
        started_at  REAL NOT NULL,
        ended_at    REAL
    );
    CREATE TABLE tasks (
        id          TEXT PRIMARY KEY,
        session_id  TEXT NOT NULL,
        type        TEXT NOT NULL,
        status      TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        owner       TEXT NOT NULL DEFAULT '',
        start_time  REAL NOT NULL,
        end_time    REAL,
        output_file TEXT NOT NULL DEFAULT '',
        notified    INTEGER NOT NULL DEFAULT 0,
        data        TEXT NOT NULL
    );
    CREATE INDEX tasks_by_session ON tasks(session_id, start_time);
    CREATE TABLE notifications (
        id           TEXT PRIMARY KEY,
        seq          INTEGER NOT NULL,
        session_id   TEXT NOT NULL,
        owner        TEXT NOT NULL,
        task_id      TEXT NOT NULL,
        kind         TEXT NOT NULL,
        priority     TEXT NOT NULL,
        body         TEXT NOT NULL,
        created_at   REAL NOT NULL,
        delivered_at REAL
    );
    CREATE INDEX notifications_pending ON notifications(session_id, delivered_at, seq);
    CREATE TABLE processes (
        pid         INTEGER NOT NULL,
        pid_start   REAL NOT NULL,
        pgid        INTEGER NOT NULL,
        session_id  TEXT NOT NULL,
        task_id     TEXT NOT NULL,
        owner_pid   INTEGER NOT NULL,
        owner_start REAL NOT NULL,
        boot_id     TEXT NOT NULL DEFAULT '',
        detached    INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (pid, pid_start)
    );
    """,
    # 2: one durable mailbox for every message to one recipient (a session id or an agent
    # id): task notifications (kind 'notification', sent by their task, 'topic' says terminal
    # or stall) and SendMessage text (kind 'message'). The old queue's rows move over; a view
    # keeps the old table's name and columns for readers of notifications. The directory maps
    # the names given at spawn to addresses, per session; 'team' is '' until teams exist.
    """
    CREATE TABLE mailbox (
        id           TEXT PRIMARY KEY,
        seq          INTEGER NOT NULL,
        session_id   TEXT NOT NULL,
        recipient    TEXT NOT NULL,
        sender       TEXT NOT NULL,
        kind         TEXT NOT NULL,
        topic        TEXT NOT NULL DEFAULT '',
        priority     TEXT NOT NULL,
        body         TEXT NOT NULL,
        summary      TEXT NOT NULL DEFAULT '',
        created_at   REAL NOT NULL,
        delivered_at REAL
    );
    CREATE INDEX mailbox_pending ON mailbox(session_id, delivered_at, seq);
    INSERT INTO mailbox(id, seq, session_id, recipient, sender, kind, topic, priority, body,
                        summary, created_at, delivered_at)
        SELECT id, seq, session_id, owner, task_id, 'notification', kind, priority, body, '',
               created_at, delivered_at
        FROM notifications;
    DROP TABLE notifications;
    CREATE VIEW notifications AS
        SELECT id, seq, session_id, recipient AS owner, sender AS task_id, topic AS kind,
               priority, body, created_at, delivered_at
        FROM mailbox WHERE kind = 'notification';
    CREATE TABLE addresses (
        session_id  TEXT NOT NULL,
        team        TEXT NOT NULL DEFAULT '',
        name        TEXT NOT NULL,
        address     TEXT NOT NULL,
        created_at  REAL NOT NULL,
        PRIMARY KEY (session_id, team, name)
    );
    """,
    # 3: environment tags recorded for the orphan sweep, before anything carrying one starts
    # (MCP servers, hooks, git, a shell until its pid is known): the processes are found by
    # the tag alone. Each row names the session process that owns it, like a process record.
    # Tag-only records used to be process rows with pid 0: the live ones move over (a detached
    # one was dropped by the sweep, unkilled, so it is dropped here too).
    """
    CREATE TABLE tags (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        tag         TEXT NOT NULL,
        session_id  TEXT NOT NULL,
        owner_pid   INTEGER NOT NULL,
        owner_start REAL NOT NULL,
        boot_id     TEXT NOT NULL DEFAULT '',
        created_at  REAL NOT NULL
    );
    INSERT INTO tags(tag, session_id, owner_pid, owner_start, boot_id, created_at)
        SELECT task_id, session_id, owner_pid, owner_start, boot_id, pid_start
        FROM processes WHERE pid = 0 AND detached = 0 ORDER BY pid_start;
    DELETE FROM processes WHERE pid = 0;
    """,
    # 4: agent teams: a team (one lead session each), its members, and its task list. The
    # task list is keyed by the team's name but outlives the team (TeamDelete keeps it), so
    # there is no foreign key to teams; members are deleted with their team by the store.
    # Times are epoch seconds; blocks, blocked_by and metadata hold JSON.
    """
    CREATE TABLE teams (
        name            TEXT PRIMARY KEY,
        description     TEXT NOT NULL DEFAULT '',
        created_at      REAL NOT NULL,
        lead_agent_id   TEXT NOT NULL,
        lead_session_id TEXT NOT NULL
    );
    CREATE INDEX teams_by_lead ON teams(lead_session_id);
    CREATE TABLE team_members (
        team               TEXT NOT NULL,
        name               TEXT NOT NULL,
        agent_id           TEXT NOT NULL,
        agent_type         TEXT NOT NULL,
        model              TEXT,
        prompt             TEXT NOT NULL DEFAULT '',
        color              TEXT,
        plan_mode_required INTEGER NOT NULL DEFAULT 0,
        joined_at          REAL NOT NULL,
        tmux_pane_id       TEXT NOT NULL DEFAULT '',
        cwd                TEXT NOT NULL DEFAULT '',
        worktree_path      TEXT,
        backend_type       TEXT NOT NULL DEFAULT 'in-process',
        is_active          INTEGER NOT NULL DEFAULT 1,
        mode               TEXT,
        PRIMARY KEY (team, name)
    );
    CREATE TABLE team_tasks (
        team        TEXT NOT NULL,
        id          INTEGER NOT NULL,
        subject     TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        active_form TEXT,
        status      TEXT NOT NULL,
        owner       TEXT,
        blocks      TEXT NOT NULL DEFAULT '[]',
        blocked_by  TEXT NOT NULL DEFAULT '[]',
        metadata    TEXT NOT NULL DEFAULT '{}',
        created_at  REAL NOT NULL,
        updated_at  REAL NOT NULL,
        PRIMARY KEY (team, id)
    );
    """,
    # 5: the highest task id each team's list has handed out, so that an id is never given
    # twice (the highest task deleted, or refused by a TaskCreated hook, keeps its number).
    """
    CREATE TABLE team_task_ids (
        team  TEXT PRIMARY KEY,
        last  INTEGER NOT NULL
    );
    INSERT INTO team_task_ids(team, last) SELECT team, MAX(id) FROM team_tasks GROUP BY team;
    """,
    # 6: messages that waited in an agent's task record (``pending_messages``, the channel
    # before the mailbox) move into the mailbox, so an upgrade loses none of them: each
    # becomes an undelivered 'message' row for its agent, after the session's other rows,
    # in the order it was queued. A record that is not valid JSON is left as it is.
    """
    INSERT INTO mailbox(id, seq, session_id, recipient, sender, kind, topic, priority, body,
                        summary, created_at, delivered_at)
        SELECT lower(hex(randomblob(8))),
               COALESCE((SELECT MAX(m.seq) FROM mailbox m WHERE m.session_id = q.session_id),
                        -1) + q.n,
               q.session_id, q.id, '', 'message', '', 'next', q.body, '', q.created, NULL
        FROM (SELECT t.session_id, t.id, CAST(j.value AS TEXT) AS body,
                     COALESCE(t.end_time, t.start_time) AS created,
                     ROW_NUMBER() OVER (PARTITION BY t.session_id
                                        ORDER BY t.start_time, t.id, j.key) AS n
              FROM tasks t,
                   json_each(CASE WHEN json_valid(t.data) THEN t.data ELSE '{}' END,
                             '$.pending_messages') j) q;
    UPDATE tasks SET data = json_remove(data, '$.pending_messages')
        WHERE json_valid(data) AND json_type(data, '$.pending_messages') IS NOT NULL;
    """,
    # 7: protocol is never read out of text. A team's protocol messages (shutdown, plan
    # approval, idle notifications, task assignments) are rows of kind 'protocol', which the
    # recipient's model is shown and its code acts on; a pane teammate's permission request
    # and its answer are rows of kind 'control', which only code reads. Only the code paths
    # that send protocol write them, never text a model wrote. 'payload' holds what code
    # reads of such a row (the JSON object it was sent as; '' for text and notifications),
    # apart from the body a model is shown; 'topic' holds its type. The permission rows of
    # before were kind 'protocol', their body the JSON: they become 'control'. Messages of
    # before stay text: a protocol message among them cannot be told from text shaped so.
    """
    ALTER TABLE mailbox ADD COLUMN payload TEXT NOT NULL DEFAULT '';
    UPDATE mailbox
        SET kind = 'control',
            payload = body,
            topic = CASE WHEN json_valid(body)
                         THEN COALESCE(CAST(json_extract(body, '$.type') AS TEXT), '')
                         ELSE '' END
        WHERE kind = 'protocol';
    """,
    # 8: a tag record may own a directory (a local Ray's temporary directory, a remote agent's
    # scratch checkout): the sweep removes it once nothing carrying the tag is left.
    """
    ALTER TABLE tags ADD COLUMN path TEXT NOT NULL DEFAULT '';
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)
