"""The check after a routed transform's run: each route's batches, and each batch's account across the routes."""

from __future__ import annotations

from dataclasses import replace

from include.contract.routes import RoutingAccount
from include.contract.silver_stand import BronzePosition, SilverCommit
from include.contract.transform_check import RouteRun, check_routed

ROUTES = ("orders", "clicks")


def _commit(route: str, batch: int, start: int, end: int, account: RoutingAccount, *, epoch: int = 0,
            version: int | None = None, **counts: int) -> SilverCommit:  # fmt: skip
    read = account.matched[route]
    full = {"upserted": read, "deleted": 0, "quarantined": 0, "superseded": 0, "replayed": 0, **counts}
    return SilverCommit("shop", "run", epoch, batch, BronzePosition(start), BronzePosition(end), read, full, {},
                        version=batch + 1 if version is None else version, route=route,
                        routing=account.to_json())  # fmt: skip


# Batch 0 reads bronze versions 0..1 (10 records): 6 orders, 3 clicks, 1 unrouted. Batch 1 reads version 2
# (4 records): 1 order also taken by clicks (overlap all), 2 clicks, 1 order.
A0 = RoutingAccount(bronze=10, matched={"orders": 6, "clicks": 3}, unrouted=1)
A1 = RoutingAccount(bronze=4, matched={"orders": 2, "clicks": 3}, unrouted=0, overlapping=1, extra=1)
BRONZE = {0: 7, 1: 3, 2: 4}


def _runs(**changed: tuple[SilverCommit, ...]) -> dict[str, RouteRun]:
    commits = {name: (_commit(name, 0, 0, 2, A0), _commit(name, 1, 2, 3, A1)) for name in ROUTES}
    commits.update(changed)
    return {name: RouteRun(None, c, {}) for name, c in commits.items()}


def _check(runs: dict[str, RouteRun], unrouted: dict[tuple[int, int], int] | None = None,
           policy: str = "quarantine", bronze: dict[int, int] | None = None):  # type: ignore[no-untyped-def]  # fmt: skip
    return check_routed(routes=runs, bronze_rows=BRONZE if bronze is None else bronze, bronze_version=2,
                        unrouted_rows={(0, 0): 1} if unrouted is None else unrouted,
                        unrouted_policy=policy)  # fmt: skip


def test_a_run_whose_batches_account_for_every_bronze_record_passes() -> None:
    result = _check(_runs())
    assert result.ok, result.violations
    assert (result.commits, result.read, result.counts["upserted"], result.counts["unrouted"]) == (2, 14, 14, 1)
    assert result.summary_line() == "transform accounted: 14 read in 2 batches (14 upserted, 1 unrouted)"


def test_a_batch_whose_account_does_not_add_up_is_a_violation() -> None:
    lost = replace(A0, bronze=11)
    result = _check(_runs(orders=(_commit("orders", 0, 0, 2, lost), _commit("orders", 1, 2, 3, A1)),
                          clicks=(_commit("clicks", 0, 0, 2, lost), _commit("clicks", 1, 2, 3, A1))),
                    bronze={0: 8, 1: 3, 2: 4})  # fmt: skip
    assert "batch 0 of epoch 0: 11 bronze records != 9 routed - 0 extra copies + 1 unrouted" in result.violations


def test_routes_must_agree_on_a_batch_and_read_what_it_routed_to_them() -> None:
    other = replace(A0, matched={"orders": 5, "clicks": 4})
    result = _check(_runs(clicks=(_commit("clicks", 0, 0, 2, other), _commit("clicks", 1, 2, 3, A1))))
    assert any(v.startswith("route clicks: silver version 1 (epoch 0 batch 0) disagrees with route orders'")
               for v in result.violations), result.violations  # fmt: skip
    short = replace(_commit("orders", 0, 0, 2, A0), read=5, counts={"upserted": 5})
    result = _check(_runs(orders=(short, _commit("orders", 1, 2, 3, A1))))
    assert ("route orders: silver version 1 (epoch 0 batch 0) read 5 records but its batch's account routed 6 to it"
            in result.violations)  # fmt: skip


def test_a_batch_must_read_what_bronze_holds_in_its_versions() -> None:
    result = _check(_runs(), bronze={0: 7, 1: 4, 2: 4})
    assert "batch 0 of epoch 0 read 10 bronze records but bronze versions 0..1 hold 11" in result.violations


def test_the_unrouted_quarantine_must_hold_what_the_account_counted() -> None:
    assert "batch 0 of epoch 0 counted 1 unrouted records but their quarantine append holds 2" in _check(
        _runs(), unrouted={(0, 0): 2}).violations  # fmt: skip
    assert any("an earlier attempt wrote it" in n for n in _check(_runs(), unrouted={}).notes)
    ignored = _check(_runs(), unrouted={(0, 0): 1}, policy="ignore")
    assert "batch 0 of epoch 0 appended 1 unrouted records to quarantine under policy ignore" in ignored.violations
    assert _check(_runs(), unrouted={}, policy="ignore").ok


def test_a_commit_of_another_route_or_without_an_account_is_a_violation() -> None:
    stray = replace(_commit("orders", 0, 0, 2, A0), route="clicks")
    bare = replace(_commit("clicks", 0, 0, 2, A0), routing=None)
    result = _check(_runs(orders=(stray, _commit("orders", 1, 2, 3, A1)), clicks=(bare, _commit("clicks", 1, 2, 3, A1))))
    assert "route orders: silver version 1 (epoch 0 batch 0) was written as route 'clicks''s batch" in result.violations
    assert "route clicks: silver version 1 (epoch 0 batch 0) carries no routing account" in result.violations


def test_a_new_epoch_may_start_a_route_before_where_it_stood() -> None:
    # Route orders stood at bronze version 3, clicks at 2 (a driver died between their commits and the checkpoint
    # was lost): the new epoch re-reads version 2 for both.
    again = RoutingAccount(bronze=4, matched={"orders": 2, "clicks": 3}, unrouted=0, overlapping=1, extra=1)
    runs = {
        "orders": RouteRun(_commit("orders", 1, 2, 3, A1, version=5),
                           (_commit("orders", 0, 2, 3, again, epoch=1, version=6, upserted=0, replayed=2),), {}),
        "clicks": RouteRun(_commit("clicks", 0, 0, 2, A0, version=4),
                           (_commit("clicks", 0, 2, 3, again, epoch=1, version=5),), {}),
    }  # fmt: skip
    result = _check(runs, unrouted={})
    assert result.ok, result.violations
    assert any("before where this route stood (3)" in n for n in result.notes)
