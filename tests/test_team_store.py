"""Agent teams in the store: schema 4, the roster's rules, ids and claims under contention."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from taskloom.settings import db_path
from taskloom.store import Store, TeamTables, TeamTaskError
from taskloom.store.schema import MIGRATIONS, SCHEMA_VERSION
from taskloom.teams import PALETTE, Roster, TeamError
from taskloom.testing import FakeClock

SESSION = "0123456789abcdef"


@pytest.fixture
def roster(store: Store) -> Roster:
    return Roster(store, SESSION, FakeClock(start=1_700_000_000.25))


def join(roster: Roster, team: str, name: str) -> None:
    roster.join(
        team,
        name,
        agent_type="general-purpose",
        model=None,
        prompt=f"you are {name}",
        plan_mode_required=False,
        cwd="/work",
        mode=None,
    )


# -- schema -------------------------------------------------------------------------------------


def test_a_schema_3_database_migrates_to_the_latest_keeping_its_rows(home: Path) -> None:
    path = db_path()
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path, isolation_level=None)
    for number, script in enumerate(MIGRATIONS[:3]):
        for statement in (s for s in script.split(";") if s.strip()):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {number + 1}")
    conn.execute("INSERT INTO sessions(id, pid, pid_start, started_at) VALUES ('s1', 1, 2.0, 3.0)")
    conn.close()
    store = Store(path)
    try:
        assert SCHEMA_VERSION == 8
        assert store.schema_version == SCHEMA_VERSION
        assert store.get_session("s1") is not None
        tables = {r["name"] for r in store.query("SELECT name FROM sqlite_master")}
        assert {"teams", "team_members", "team_tasks", "team_task_ids"} <= tables
    finally:
        store.close()


# -- teams and members ----------------------------------------------------------------------------


def test_create_names_the_lead_and_defaults_the_name(roster: Roster) -> None:
    team = roster.create(None, "build it", cwd="/work")
    assert team.name == "session-01234567"
    assert team.lead_agent_id == "team-lead@session-01234567"
    assert [(m.name, m.agent_id, m.is_lead) for m in team.members] == [
        ("team-lead", "team-lead@session-01234567", True)
    ]
    assert roster.team() == team


def test_one_team_per_lead(roster: Roster) -> None:
    roster.create("alpha", "")
    with pytest.raises(TeamError) as info:
        roster.create("beta", "")
    assert str(info.value) == (
        'Already leading team "alpha". A leader can only manage one team at a time. Use '
        "TeamDelete to end the current team before creating a new one."
    )


def test_a_name_taken_by_another_lead_is_refused(store: Store, roster: Roster) -> None:
    roster.create("alpha", "")
    other = Roster(store, "another-session")
    with pytest.raises(TeamError, match='Team "alpha" already exists'):
        other.create("alpha", "")
    assert other.team() is None


@pytest.mark.parametrize("name", ["", "-x", "a b", "x" * 65, "é", "a/b", "a@b"])
def test_team_and_member_names_follow_the_rule(roster: Roster, name: str) -> None:
    if name:
        with pytest.raises(TeamError) as info:
            roster.create(name, "")
        assert str(info.value) == (
            f'Team name "{name}" is invalid: use 1-64 letters, digits, "-" or "_", starting '
            "with a letter or digit."
        )
    roster.create("alpha", "")
    with pytest.raises(TeamError, match=r'Teammate name ".*" is invalid: use 1-64 letters'):
        join(roster, "alpha", name)


def test_member_names_are_unique_and_not_the_leads(roster: Roster) -> None:
    roster.create("alpha", "")
    join(roster, "alpha", "alice")
    with pytest.raises(TeamError) as info:
        join(roster, "alpha", "alice")
    assert str(info.value) == 'Teammate name "alice" is taken in team "alpha". Choose another name.'
    with pytest.raises(TeamError, match='"team-lead" is the lead\'s name'):
        join(roster, "alpha", "team-lead")
    with pytest.raises(TeamError, match='Team "nope" does not exist'):
        join(roster, "nope", "bob")
    join(roster, "alpha", "x" * 64)


def test_colours_follow_the_palette_and_cycle(roster: Roster) -> None:
    roster.create("alpha", "")
    for i in range(10):
        join(roster, "alpha", f"m{i}")
    team = roster.team()
    assert team is not None
    assert [m.color for m in team.members] == [None, *PALETTE, "blue", "green"]
    assert PALETTE == ("blue", "green", "yellow", "purple", "orange", "pink", "cyan", "red")


def test_to_json_has_claude_codes_field_names(roster: Roster) -> None:
    roster.create("alpha", "the team", cwd="/work")
    join(roster, "alpha", "alice")
    team = roster.team()
    assert team is not None
    data = team.to_json()
    assert list(data) == [
        "name", "description", "createdAt", "leadAgentId", "leadSessionId", "members"
    ]  # fmt: skip
    assert data["createdAt"] == 1_700_000_000_250
    assert data["leadSessionId"] == SESSION
    alice = data["members"][1]
    assert list(alice) == [
        "agentId", "name", "agentType", "model", "prompt", "color", "planModeRequired",
        "joinedAt", "tmuxPaneId", "cwd", "worktreePath", "backendType", "isActive", "mode",
    ]  # fmt: skip
    assert alice["agentId"] == "alice@alpha"
    assert (alice["color"], alice["backendType"], alice["isActive"]) == ("blue", "in-process", True)
    assert isinstance(alice["joinedAt"], int)


def test_delete_refuses_while_teammates_are_active_and_keeps_the_tasks(
    store: Store, roster: Roster
) -> None:
    roster.create("alpha", "")
    join(roster, "alpha", "alice")
    join(roster, "alpha", "bob")
    tables = TeamTables(store)
    tables.create_task("alpha", "one", "", None, None, 1.0)
    with pytest.raises(TeamError) as info:
        roster.delete("alpha")
    assert str(info.value) == (
        'Cannot delete team "alpha": 2 member(s) still active (alice, bob). Shut them down first.'
    )
    roster.set_active("alpha", "alice", False)
    roster.set_active("alpha", "bob", False)
    roster.delete("alpha")  # the lead being active does not keep it
    assert roster.team() is None
    assert tables.members("alpha") == []
    assert [t.subject for t in tables.list_tasks("alpha")] == ["one"]
    roster.create("beta", "")  # the lead may now create another


def test_delete_and_set_active_need_a_team_and_member(store: Store, roster: Roster) -> None:
    with pytest.raises(TeamError, match='Team "alpha" does not exist'):
        roster.delete("alpha")
    Roster(store, "someone-else").create("alpha", "")
    with pytest.raises(TeamError, match="another session leads it"):
        roster.delete("alpha")
    with pytest.raises(TeamError, match='Team "alpha" has no member "zed"'):
        roster.set_active("alpha", "zed", True)


def test_resolve_by_name_or_name_at_team(store: Store, roster: Roster) -> None:
    roster.create("alpha", "")
    join(roster, "alpha", "alice")
    other = Roster(store, "s2")
    other.create("beta", "")
    join(other, "beta", "bob")
    alice = roster.resolve("alice")
    assert alice is not None and alice.agent_id == "alice@alpha"
    bob = roster.resolve("bob@beta")
    assert bob is not None and bob.team == "beta"
    assert roster.resolve("bob") is None
    assert roster.resolve("team-lead") is not None
    assert Roster(store, "s3").resolve("alice") is None


def test_set_member_changes_fields_and_refuses_unknown_ones(store: Store, roster: Roster) -> None:
    roster.create("alpha", "")
    join(roster, "alpha", "alice")
    tables = TeamTables(store)
    assert tables.set_member("alpha", "alice", tmux_pane_id="%3", is_active=False)
    member = tables.member("alpha", "alice")
    assert member is not None and (member.tmux_pane_id, member.is_active) == ("%3", False)
    with pytest.raises(ValueError, match="agent_id"):
        tables.set_member("alpha", "alice", agent_id="x")


# -- the task list ---------------------------------------------------------------------------------


def test_task_ids_never_collide_across_connections(store: Store) -> None:
    stores = [Store(store.path) for _ in range(8)]
    got: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def create(s: Store) -> None:
        tables = TeamTables(s)
        start.wait()
        ids = [tables.create_task("alpha", "t", "", None, None, 1.0).id for _ in range(50)]
        with lock:
            got.extend(ids)

    threads = [threading.Thread(target=create, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert sorted(got) == list(range(1, 401))
    assert [t.id for t in TeamTables(store).list_tasks("alpha")] == list(range(1, 401))


def race_claims(stores: dict[str, Store], task_id: int) -> dict[str, str]:
    """Each store's member claims the task at the same instant: "won" or the error text."""
    barrier = threading.Barrier(len(stores))
    results: dict[str, str] = {}

    def claim(who: str, s: Store) -> None:
        barrier.wait()
        try:
            TeamTables(s).update_task(
                "alpha", task_id, {"status": "in_progress"}, claimant=who, when=2.0
            )
            results[who] = "won"
        except TeamTaskError as exc:
            results[who] = str(exc)

    threads = [threading.Thread(target=claim, args=item) for item in stores.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_two_simultaneous_claims_have_exactly_one_winner(store: Store) -> None:
    stores = {"alice": Store(store.path), "bob": Store(store.path)}
    try:
        for round_ in range(100):
            task = TeamTables(store).create_task("alpha", f"t{round_}", "", None, None, 1.0)
            results = race_claims(stores, task.id)
            winners = [who for who, r in results.items() if r == "won"]
            assert len(winners) == 1, results
            (loser,) = set(stores) - set(winners)
            assert results[loser] == f"Task #{task.id} is already owned by {winners[0]}"
            row = TeamTables(store).get_task("alpha", task.id)
            assert row is not None and row.owner == winners[0]
    finally:
        for s in stores.values():
            s.close()


def test_a_claim_of_ones_own_task_succeeds(store: Store) -> None:
    tables = TeamTables(store)
    task = tables.create_task("alpha", "t", "", None, None, 1.0)
    tables.update_task("alpha", task.id, {"owner": "alice"}, when=2.0)
    row, changed = tables.update_task(
        "alpha", task.id, {"status": "in_progress"}, claimant="alice", when=3.0
    )
    assert (row.owner, row.status, changed, row.updated_at) == (
        "alice",
        "in_progress",
        ["status"],
        3.0,
    )


def test_blockers_link_both_sides_and_hold_the_start(store: Store) -> None:
    tables = TeamTables(store)
    for subject in ("a", "b", "c", "d"):
        tables.create_task("alpha", subject, "", None, None, 1.0)
    _, changed = tables.update_task("alpha", 1, {"add_blocks": [2, 3]}, when=2.0)
    assert changed == ["blocks"]
    _, changed = tables.update_task("alpha", 2, {"add_blocked_by": [4]}, when=2.0)
    assert changed == ["blocked_by"]
    rows = {t.id: t for t in tables.list_tasks("alpha")}
    assert (rows[1].blocks, rows[2].blocked_by, rows[3].blocked_by) == ((2, 3), (1, 4), (1,))
    assert rows[4].blocks == (2,)
    with pytest.raises(TeamTaskError) as info:
        tables.update_task("alpha", 2, {"status": "in_progress"}, when=3.0)
    assert str(info.value) == "Task #2 is blocked by #1, #4"
    tables.update_task("alpha", 1, {"status": "completed"}, when=3.0)
    with pytest.raises(TeamTaskError, match=r"^Task #2 is blocked by #4$"):
        tables.update_task("alpha", 2, {"status": "in_progress"}, when=3.0)
    row = tables.get_task("alpha", 2)
    assert row is not None and row.status == "pending"  # a refused change changes nothing
    tables.update_task("alpha", 4, {"status": "deleted"}, when=4.0)
    row, changed = tables.update_task("alpha", 2, {"status": "in_progress"}, when=5.0)
    assert (row.status, row.blocked_by, changed) == ("in_progress", (1,), ["status"])
    assert tables.get_task("alpha", 4) is None


def test_linking_unknown_or_self_and_bad_statuses_are_refused(store: Store) -> None:
    tables = TeamTables(store)
    tables.create_task("alpha", "a", "", None, None, 1.0)
    with pytest.raises(TeamTaskError, match=r"^Task #9 not found$"):
        tables.update_task("alpha", 1, {"add_blocks": [9]}, when=2.0)
    with pytest.raises(TeamTaskError, match="cannot block itself"):
        tables.update_task("alpha", 1, {"add_blocked_by": [1]}, when=2.0)
    with pytest.raises(TeamTaskError, match='Invalid status "done"'):
        tables.update_task("alpha", 1, {"status": "done"}, when=2.0)
    with pytest.raises(TeamTaskError, match=r"^Task #7 not found$"):
        tables.update_task("alpha", 7, {"subject": "x"}, when=2.0)


def test_metadata_merges_and_task_lists_are_per_team(store: Store) -> None:
    tables = TeamTables(store)
    tables.create_task("alpha", "a", "", "doing a", {"k": 1, "drop": True}, 1.0)
    row, changed = tables.update_task(
        "alpha", 1, {"metadata": {"drop": None, "new": "x"}, "subject": "a"}, when=2.0
    )
    assert (row.metadata, changed, row.active_form) == (
        {"k": 1, "new": "x"},
        ["metadata"],
        "doing a",
    )
    assert tables.create_task("beta", "b", "", None, None, 1.0).id == 1
    assert tables.count_tasks() == {"alpha": {"pending": 1}, "beta": {"pending": 1}}


def test_a_deleted_tasks_id_is_never_given_again(store: Store) -> None:
    tables = TeamTables(store)
    first = tables.create_task("t", "one", "", None, None, 1.0)
    second = tables.create_task("t", "two", "", None, None, 2.0)
    assert (first.id, second.id) == (1, 2)
    tables.update_task("t", 2, {"status": "deleted"}, when=3.0)
    assert tables.create_task("t", "three", "", None, None, 4.0).id == 3
    assert tables.create_task("other", "x", "", None, None, 5.0).id == 1  # per team
