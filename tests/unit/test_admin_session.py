"""Admin session tokens and the login limiter, with a controlled clock and the in-memory store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from engram.adapters.search.inmemory import InMemorySearchIndex
from engram.adapters.storage.inmemory import InMemoryMemoryStore
from engram.entrypoints.http.proxies import TrustedProxies
from engram.entrypoints.http.session import SESSION_SECONDS, AdminSessions, LoginLimiter
from engram.services.index.upkeep import IndexUpkeep
from engram.services.runtime_settings import SYSTEM_NAMESPACE
from engram.settings import Settings
from starlette.requests import HTTPConnection

from tests.fakes.clock import ManualClock


def clock_at(t: float = 1_800_000_000.0) -> ManualClock:
    return ManualClock(datetime.fromtimestamp(t, UTC))


def _sessions(password: str | None, store: InMemoryMemoryStore | None = None) -> AdminSessions:
    """Sessions and their store on one manual clock."""
    clock = ManualClock()
    return AdminSessions(password, store or InMemoryMemoryStore(clock=clock), "default", clock=clock)


def test_token_expires_after_12_hours() -> None:
    # Given a session issued now
    clock = clock_at()
    sessions = AdminSessions("pw-123456", InMemoryMemoryStore(clock=clock), "default", clock=clock)
    token, expires = sessions.issue()
    assert expires == 1_800_000_000 + SESSION_SECONDS == 1_800_000_000 + 12 * 3600
    # When time passes, Then it is valid until the 12 h mark and not after
    clock.advance(seconds=SESSION_SECONDS - 1)
    assert sessions.verify(token) is not None
    clock.advance(seconds=1)
    assert sessions.verify(token) is None


def test_processes_sharing_a_store_accept_each_others_cookies_until_the_password_changes() -> None:
    # Given two processes on one store with the same password
    store = InMemoryMemoryStore(clock=ManualClock())
    first = _sessions("pw-123456", store)
    second = _sessions("pw-123456", store)
    token, _ = first.issue()
    # Then the second accepts the first's cookie (shared stored salt)
    assert second.verify(token) is not None
    # When the password changes, Then old cookies are void
    assert _sessions("another-pw", store).verify(token) is None
    # And without a password nothing verifies
    assert _sessions(None, store).verify(token) is None


def test_revoked_token_is_refused_everywhere() -> None:
    clock = clock_at()
    store = InMemoryMemoryStore(clock=clock)
    sessions = AdminSessions("pw-123456", store, "default", clock=clock)
    token, expires = sessions.issue()
    # When it is revoked by one process
    sessions.revoke(token)
    # Then no process accepts it, until the moment it would have expired anyway (the revocation
    # entry expires on the same clock as the cookie)
    other = AdminSessions("pw-123456", store, "default", clock=clock)
    assert other.verify(token) is None
    clock.advance(seconds=SESSION_SECONDS - 1)
    assert other.verify(token) is None
    assert store.get_cache(SYSTEM_NAMESPACE, f"admin_revoked:{token.split('.')[0]}") is True
    clock.advance(seconds=1)
    assert store.get_cache(SYSTEM_NAMESPACE, f"admin_revoked:{token.split('.')[0]}") is None
    assert other.verify(token) is None and expires == 1_800_000_000 + SESSION_SECONDS


def test_password_check_is_exact() -> None:
    sessions = _sessions("pw-123456")
    assert sessions.check_password("pw-123456")
    assert not sessions.check_password("pw-1234567")
    assert not sessions.check_password("")
    assert not _sessions(None).check_password("")


def test_limiter_allows_five_per_minute_per_client() -> None:
    # Given a limiter of 5 attempts per 60 s
    start = clock_at(0.0).now()
    clock = ManualClock(start)
    limiter = LoginLimiter(5, 60.0, clock=clock)
    # When a client tries once a second, Then the 6th attempt waits until the first leaves the window
    allowed = []
    for second in range(5):
        clock.set(start + timedelta(seconds=second))
        allowed.append(limiter.hit("a"))
    assert allowed == [None] * 5
    assert limiter.hit("a") == 56.0
    assert limiter.hit("b") is None
    # When the window slides past the first attempt, Then one more is allowed
    clock.set(start + timedelta(seconds=60))
    assert limiter.hit("a") is None
    assert limiter.hit("a") is not None


def test_limiter_memory_is_bounded() -> None:
    limiter = LoginLimiter(1, 60.0, max_clients=3, clock=clock_at(0.0))
    for ip in ("1", "2", "3", "4"):
        limiter.hit(ip)
    # The oldest client was forgotten, the newest are still limited
    assert limiter.hit("1") is None
    assert limiter.hit("4") is not None


def _conn(peer: str, *headers: tuple[str, str]) -> HTTPConnection:
    raw = [(k.encode(), v.encode()) for k, v in (("host", "engram.example"), *headers)]
    return HTTPConnection({"type": "http", "client": (peer, 5000), "headers": raw, "scheme": "http", "path": "/"})


def test_forwarded_for_counts_only_through_trusted_proxies() -> None:
    proxies = TrustedProxies(["10.0.0.0/8", "::1"])
    # An untrusted peer's claims are ignored
    assert proxies.client_ip(_conn("198.51.100.1", ("x-forwarded-for", "203.0.113.5"))) == "198.51.100.1"
    # Through a chain of trusted proxies, the right-most hop they did not add is the client
    chain = _conn("10.0.0.2", ("x-forwarded-for", "1.2.3.4, 203.0.113.5"), ("x-forwarded-for", "10.0.0.9"))
    assert proxies.client_ip(chain) == "203.0.113.5"
    assert proxies.client_ip(_conn("::1", ("x-forwarded-for", "2001:db8::7"))) == "2001:db8::7"
    # A trusted peer without the header is itself the client; nothing configured trusts nobody
    assert proxies.client_ip(_conn("10.0.0.2")) == "10.0.0.2"
    assert TrustedProxies().client_ip(_conn("127.0.0.1", ("x-forwarded-for", "203.0.113.5"))) == "127.0.0.1"
    # Host and scheme follow the same rule
    forwarded = (("x-forwarded-host", "Public.Example"), ("x-forwarded-proto", "https"))
    assert (proxies.host(_conn("10.1.1.1", *forwarded)), proxies.scheme(_conn("10.1.1.1", *forwarded))) == (
        "public.example",
        "https",
    )
    assert (proxies.host(_conn("8.8.8.8", *forwarded)), proxies.scheme(_conn("8.8.8.8", *forwarded))) == (
        "engram.example",
        "http",
    )


def test_trusted_proxies_must_be_addresses_or_ranges() -> None:
    assert Settings(trusted_proxies="127.0.0.1, 10.0.0.0/8").trusted_proxies == ["127.0.0.1", "10.0.0.0/8"]
    with pytest.raises(ValueError, match=r"proxy\.example"):
        Settings(trusted_proxies="proxy.example")


def test_a_success_clears_the_count() -> None:
    limiter = LoginLimiter(2, 60.0, clock=clock_at(0.0))
    assert limiter.hit("a") is None and limiter.hit("a") is None
    limiter.reset("a")
    assert limiter.hit("a") is None


def test_a_running_reindex_of_another_namespace_is_invisible_and_does_not_block() -> None:
    # Runs are jobs whose state lives under the namespace that started them (services/index/reindex.py):
    # one namespace never sees another's run, and each may run its own.
    from engram.adapters.storage.inmemory import InMemoryMemoryStore
    from engram.services.index.reindex import ReindexService

    class HeldQueue:
        def __init__(self) -> None:
            self.jobs: list[dict[str, str]] = []

        def enqueue(self, job: str, payload: dict[str, str]) -> None:
            self.jobs.append(payload)

    # Given alice's reindex queued and not yet run
    queue = HeldQueue()
    clock = ManualClock()
    store, index = InMemoryMemoryStore(clock=clock), InMemorySearchIndex()
    upkeep = IndexUpkeep(store, index, None, clock)
    service = ReindexService(store, upkeep=upkeep, embedder=None, clock=clock, queue=queue)
    alice = service.start("alice")
    # When bob starts one and polls, Then he gets his own run and never alice's
    bob = service.start("bob")
    assert bob["namespace"] == "bob" and bob["run_id"] != alice["run_id"]
    assert service.status("bob")["run_id"] == bob["run_id"]
    assert "alice" not in str(service.status("bob"))
    # And alice asking again sees her own run, still the same one
    assert service.start("alice")["run_id"] == alice["run_id"]
    assert [job["namespace"] for job in queue.jobs] == ["alice", "bob"]


def test_login_attempts_are_counted_across_instances_in_the_shared_limiter() -> None:
    # Given two Lambda instances of the API, each with its own process limiter, sharing the DynamoDB counter
    pytest.importorskip("moto")
    import boto3
    from engram.adapters.ratelimit.dynamodb import DynamoRateLimiter
    from engram.adapters.storage.dynamodb import create_table
    from engram.services.ratelimit import RequestLimits

    from tests.fakes.moto_aws import REGION, TABLE, mocked_aws

    with mocked_aws():
        client = boto3.client("dynamodb", region_name=REGION)
        create_table(client, TABLE)
        clock = clock_at()
        limits = RequestLimits(DynamoRateLimiter(TABLE, client, clock=clock), chat_per_minute=0, requests_per_minute=0)

        def instance() -> LoginLimiter:
            return LoginLimiter(5, 60.0, clock=clock, shared=lambda c: limits.login(c, attempts=5, window_seconds=60))

        first, second = instance(), instance()
        # When a client guesses three times on one instance and twice on a new one
        assert [first.hit("203.0.113.9") for _ in range(3)] == [None] * 3
        assert [second.hit("203.0.113.9") for _ in range(2)] == [None] * 2
        # Then a third instance refuses the sixth guess (each alone would allow five more)
        wait = instance().hit("203.0.113.9")
        assert wait is not None and 1 <= wait <= 60
        # And a right password on any instance clears the shared count (only wrong passwords add up)
        limits.login_succeeded("203.0.113.9", window_seconds=60)
        assert second.hit("203.0.113.9") is None
        # And another address is not affected; the next window allows guesses again
        assert first.hit("198.51.100.7") is None
        clock.advance(seconds=60)
        assert instance().hit("203.0.113.9") is None


def test_an_unreachable_shared_limiter_leaves_the_process_limit() -> None:
    # Given a shared counter that fails (the table unreachable)
    from engram.services.ratelimit import RequestLimits

    class Down:
        def hit(self, key: str, limit: int, window_seconds: int) -> float | None:
            raise ConnectionError("no table")

        def reset(self, key: str, window_seconds: int) -> None:
            raise ConnectionError("no table")

    limits = RequestLimits(Down(), chat_per_minute=0, requests_per_minute=0)
    limiter = LoginLimiter(
        2, 60.0, clock=clock_at(0.0), shared=lambda c: limits.login(c, attempts=2, window_seconds=60)
    )
    # Then attempts still count in process (fail open for the shared one, never for the panel)
    assert [limiter.hit("a"), limiter.hit("a")] == [None, None]
    assert limiter.hit("a") is not None
