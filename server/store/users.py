"""Users, their bearer tokens, and which virtual clusters they may submit to.

A token is shown once, when it is made, and only its SHA-256 is stored: tokens are 256 random
bits, so a plain hash is enough (nothing to guess), and looking the hash up through its unique
index needs no constant-time comparison.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlmodel import col

from server.shapes.accounts import check_name, token_hash
from server.shapes.store_errors import InvalidValue, UnknownUser, UserExists
from server.shapes.values import User
from server.store.columns import utcnow
from server.store.db import Repository
from server.store.tables import MembershipRow, TokenRow, UserRow, VirtualClusterRow

# The user a loopback-only server acts as while nobody has been added; never a real account.
LOCAL_USER = "local"

TOKEN_PREFIX = "pgt_"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def _user(row: UserRow) -> User:
    assert row.id is not None
    return User(
        id=row.id,
        name=row.name,
        admin=row.admin,
        created_at=row.created_at,
        removed_at=row.removed_at,
    )


class UserStore(Repository):
    def create_user(self, name: str, admin: bool = False) -> tuple[User, str]:
        """Add a user with a first token; return the user and the token (shown only now)."""
        check_name(name)
        if name == LOCAL_USER:
            raise InvalidValue(
                f"the user name {LOCAL_USER!r} is reserved for the loopback-only local admin"
            )
        return self._create_user(name, admin)

    def local_admin(self) -> User:
        """The reserved local admin a loopback-only server acts as while no user exists;
        created the first time it is needed, its token never shown."""
        found = self.user_named(LOCAL_USER)
        if found is not None:
            return found
        try:
            return self._create_user(LOCAL_USER, True)[0]
        except UserExists:  # another request created it in between
            found = self.user_named(LOCAL_USER)
            assert found is not None
            return found

    def _create_user(self, name: str, admin: bool) -> tuple[User, str]:
        token = new_token()
        try:
            with self._write() as session:
                found = session.scalar(select(UserRow).where(col(UserRow.name) == name))
                if found is not None and found.removed_at is not None:
                    raise UserExists(
                        f"a user named {name!r} was removed; the name stays with their jobs and "
                        "items, so choose another"
                    )
                if found is not None:
                    raise UserExists(f"a user named {name!r} exists already")
                row = UserRow(name=name, admin=admin, created_at=utcnow())
                session.add(row)
                session.flush()
                assert row.id is not None
                session.add(
                    TokenRow(user_id=row.id, token_hash=token_hash(token), created_at=utcnow())
                )
                user = _user(row)
        except IntegrityError:  # another process added the same name in between
            raise UserExists(f"a user named {name!r} exists already") from None
        return user, token

    def add_token(self, user_id: int) -> str:
        """A further token for the user; the earlier ones stay valid."""
        token = new_token()
        with self._write() as session:
            found = session.get(UserRow, user_id)
            if found is None or found.removed_at is not None:
                raise UnknownUser(f"no user has id {user_id}")
            session.add(
                TokenRow(user_id=user_id, token_hash=token_hash(token), created_at=utcnow())
            )
        return token

    def list_users(self, *, removed: bool = False) -> list[User]:
        """The users who were added, by name (the reserved local admin is not one); removed
        ones too when `removed`."""
        with self._read() as session:
            query = select(UserRow).where(col(UserRow.name) != LOCAL_USER)
            if not removed:
                query = query.where(col(UserRow.removed_at).is_(None))
            return [_user(row) for row in session.scalars(query.order_by(col(UserRow.name)))]

    def remove_user(self, name: str) -> User:
        """Remove a user: every token of theirs stops working and their memberships go; the
        row stays, so their jobs and items keep their owner's name. UnknownUser when there is
        no such user (or they were removed already)."""
        with self._write() as session:
            row = self._active_row(session, name)
            assert row.id is not None
            session.execute(delete(TokenRow).where(col(TokenRow.user_id) == row.id))
            session.execute(delete(MembershipRow).where(col(MembershipRow.user_id) == row.id))
            row.removed_at = utcnow()
            session.add(row)
            return _user(row)

    def reset_token(self, name: str) -> str:
        """A new token for the user in place of every token they had (those stop working at
        once); UnknownUser when there is no such user."""
        token = new_token()
        with self._write() as session:
            row = self._active_row(session, name)
            assert row.id is not None
            session.execute(delete(TokenRow).where(col(TokenRow.user_id) == row.id))
            session.add(TokenRow(user_id=row.id, token_hash=token_hash(token), created_at=utcnow()))
        return token

    def valid_token_hashes(self, hashes: Iterable[str]) -> set[str]:
        """Which of the token hashes still belong to a user (for open connections to drop
        the ones that were revoked)."""
        wanted = set(hashes)
        if not wanted:
            return set()
        with self._read() as session:
            found = session.scalars(
                select(col(TokenRow.token_hash)).where(col(TokenRow.token_hash).in_(wanted))
            )
            return set(found)

    def _active_row(self, session: Session, name: str) -> UserRow:
        row = session.scalar(select(UserRow).where(col(UserRow.name) == name))
        if row is None or name == LOCAL_USER:
            raise UnknownUser(f"no user is named {name!r}")
        if row.removed_at is not None:
            raise UnknownUser(f"user {name!r} was removed already")
        return row

    def user_for_token(self, token: str) -> User | None:
        """The user a bearer token belongs to, or None for an unknown token."""
        if not token:
            return None
        with self._read() as session:  # columns, not an ORM object: this runs per request
            row = (
                session.connection()
                .execute(
                    select(
                        col(UserRow.id),
                        col(UserRow.name),
                        col(UserRow.admin),
                        col(UserRow.created_at),
                    )
                    .join(TokenRow, col(TokenRow.user_id) == col(UserRow.id))
                    .where(col(TokenRow.token_hash) == token_hash(token))
                )
                .first()
            )
        if row is None:
            return None
        user_id, name, admin, created_at = row
        assert user_id is not None  # a stored row has its id
        return User(id=user_id, name=name, admin=admin, created_at=created_at)

    def get_user(self, user_id: int) -> User | None:
        with self._read() as session:
            row = session.get(UserRow, user_id)
            return _user(row) if row is not None else None

    def user_named(self, name: str) -> User | None:
        with self._read() as session:
            row = session.scalar(select(UserRow).where(col(UserRow.name) == name))
            return _user(row) if row is not None else None

    def users_by_ids(self, user_ids: Iterable[int]) -> dict[int, User]:
        """Many users in one query (for a loader); unknown ids are left out."""
        wanted = set(user_ids)
        if not wanted:
            return {}
        with self._read() as session:
            rows = session.scalars(select(UserRow).where(col(UserRow.id).in_(wanted)))
            return {user.id: user for user in map(_user, rows)}

    def count_users(self) -> int:
        """Users who were added (the reserved local admin does not count)."""
        with self._read() as session:
            query = select(func.count()).select_from(UserRow).where(col(UserRow.name) != LOCAL_USER)
            return session.scalar(query) or 0

    def add_membership(self, user_id: int, virtual_cluster: str) -> None:
        """Let the user submit to the virtual cluster; nothing changes when they already may."""
        check_name(virtual_cluster, "virtual cluster name")
        with self._write() as session:
            if session.get(UserRow, user_id) is None:
                raise UnknownUser(f"no user has id {user_id}")
            _insert_missing(
                session,
                VirtualClusterRow,
                {"name": virtual_cluster, "created_at": utcnow()},
                "name",
            )
            vc_id = session.scalar(
                select(col(VirtualClusterRow.id)).where(
                    col(VirtualClusterRow.name) == virtual_cluster
                )
            )
            _insert_missing(
                session,
                MembershipRow,
                {"user_id": user_id, "virtual_cluster_id": vc_id, "created_at": utcnow()},
                "user_id",
                "virtual_cluster_id",
            )

    def user_vcs(self, user_id: int) -> list[str]:
        """The names of the virtual clusters the user belongs to, sorted."""
        with self._read() as session:
            names = session.scalars(
                select(col(VirtualClusterRow.name))
                .join(
                    MembershipRow,
                    col(MembershipRow.virtual_cluster_id) == col(VirtualClusterRow.id),
                )
                .where(col(MembershipRow.user_id) == user_id)
                .order_by(col(VirtualClusterRow.name))
            )
            return list(names)

    def user_vcs_by_ids(self, user_ids: Iterable[int]) -> dict[int, list[str]]:
        """The virtual clusters of many users in one query, sorted by name; every id is a key
        (for a loader)."""
        wanted = set(user_ids)
        result: dict[int, list[str]] = {user_id: [] for user_id in wanted}
        if not wanted:
            return result
        with self._read() as session:
            rows = session.execute(
                select(col(MembershipRow.user_id), col(VirtualClusterRow.name))
                .join(
                    VirtualClusterRow,
                    col(VirtualClusterRow.id) == col(MembershipRow.virtual_cluster_id),
                )
                .where(col(MembershipRow.user_id).in_(wanted))
                .order_by(col(VirtualClusterRow.name))
            )
            for user_id, name in rows:
                result[user_id].append(name)
        return result


def _insert_missing(session: Session, table: Any, values: dict[str, Any], *keys: str) -> None:
    """INSERT ... ON CONFLICT DO NOTHING: a concurrent insert of the same key is no error."""
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    statement = dialect.insert(table).values(**values).on_conflict_do_nothing(index_elements=keys)
    session.execute(statement)
