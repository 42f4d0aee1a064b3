#!/bin/sh
# Start PostgreSQL on the data directory $PGDATA; on first start, create it with the role
# $POSTGRES_USER (password $POSTGRES_PASSWORD) owning the database $POSTGRES_DB. Clients on the
# Unix socket in /run/postgresql (a volume shared with the paigraph server) and over TCP log in
# with the password; the superuser `postgres` only as the postgres system user.
set -eu

: "${POSTGRES_USER:=paigraph}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "POSTGRES_PASSWORD is empty: set it (docker-compose.yml passes PAIGRAPH_DB_PASSWORD)" >&2
    exit 1
fi

as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
quoted() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/''/g")"; }
ident() { printf '"%s"' "$(printf '%s' "$1" | sed 's/"/""/g')"; }

mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
chmod 2775 /run/postgresql
# a socket or lock left by a container that is gone would keep the server from starting
rm -f /run/postgresql/.s.PGSQL.*

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    echo "creating the database cluster in $PGDATA"
    as_postgres initdb --pgdata="$PGDATA" --username=postgres --encoding=UTF8 \
        --locale=C.UTF-8 --auth-local=peer --auth-host=scram-sha-256 >/dev/null
    cat >"$PGDATA/pg_hba.conf" <<HBA
local all postgres peer
local all all scram-sha-256
host all all all scram-sha-256
HBA
    {
        echo "CREATE ROLE $(ident "$POSTGRES_USER") LOGIN PASSWORD $(quoted "$POSTGRES_PASSWORD");"
        echo "CREATE DATABASE $(ident "$POSTGRES_DB") OWNER $(ident "$POSTGRES_USER");"
    } | as_postgres postgres --single -D "$PGDATA" postgres >/dev/null
    echo "created role $POSTGRES_USER and database $POSTGRES_DB"
fi

exec setpriv --reuid=postgres --regid=postgres --init-groups \
    postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/run/postgresql
