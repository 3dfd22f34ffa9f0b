"""The contract every :class:`~sagacity.ports.NoticeClaims` meets; subclass it per adapter.

A subclass provides :meth:`NoticeClaimsContract.create_claims`: claims on the test's database
(one fresh database per test, shared by every one the test makes), not yet migrated.
"""

from __future__ import annotations

import abc
import threading

import pytest

from sagacity.ports import NoticeClaims


class NoticeClaimsContract(abc.ABC):
    """A notice is claimed once, by one claimer, whoever asks and however often."""

    @abc.abstractmethod
    def create_claims(self) -> NoticeClaims:
        """Claims on the test's database (shared by the test's), not yet migrated."""

    @pytest.fixture
    def claims(self) -> NoticeClaims:
        """Migrated claims."""
        claims = self.create_claims()
        claims.migrate()
        claims.migrate()  # repeatable
        return claims

    def test_it_implements_the_protocol(self, claims: NoticeClaims) -> None:
        assert isinstance(claims, NoticeClaims)

    def test_a_notice_is_claimed_once_and_its_neighbours_apart(self, claims: NoticeClaims) -> None:
        assert claims.claim("request.new", "s-1", 3, now_us=1)
        assert not claims.claim("request.new", "s-1", 3, now_us=2)
        assert claims.claim("request.expiring", "s-1", 3, now_us=2)
        assert claims.claim("request.new", "s-1", 4, now_us=2)
        assert claims.claim("request.new", "s-2", 3, now_us=2)

    def test_one_of_many_claimers_wins(self, claims: NoticeClaims) -> None:
        others = [claims, *(self.create_claims() for _ in range(3))]
        wins: list[bool] = []
        lock = threading.Lock()

        def claim(one: NoticeClaims) -> None:
            won = one.claim("saga.attention", "s-9", 7, now_us=5)
            with lock:
                wins.append(won)

        threads = [threading.Thread(target=claim, args=(one,)) for one in others]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(wins) == [False, False, False, True]
