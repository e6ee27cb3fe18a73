#!/bin/sh
# A cluster in /var/lib/postgresql/data on first start, with the user actsweep (POSTGRES_PASSWORD) and
# the databases actsweep (sweep records) and mlflow; then the server, on 127.0.0.1:$PGPORT only.
set -eu
bin=$(ls -d /usr/lib/postgresql/*/bin | tail -1)
data=/var/lib/postgresql/data
mkdir -p "$data" /run/postgresql && chown -R postgres:postgres "$data" /run/postgresql
if [ ! -s "$data/PG_VERSION" ]; then
  printf '%s' "$POSTGRES_PASSWORD" > /tmp/pwfile && chown postgres /tmp/pwfile
  runuser -u postgres -- "$bin/initdb" -D "$data" -U actsweep --pwfile=/tmp/pwfile --auth=scram-sha-256 \
    --encoding=UTF8 --locale=C.UTF-8 >/dev/null
  rm /tmp/pwfile
  runuser -u postgres -- "$bin/pg_ctl" -D "$data" -o "-c listen_addresses='' -p $PGPORT" -w start >/dev/null
  for db in actsweep mlflow; do
    runuser -u postgres -- env PGPASSWORD="$POSTGRES_PASSWORD" "$bin/createdb" -h /run/postgresql -p "$PGPORT" -U actsweep "$db"
  done
  runuser -u postgres -- "$bin/pg_ctl" -D "$data" -w stop >/dev/null
fi
exec runuser -u postgres -- "$bin/postgres" -D "$data" -c listen_addresses=127.0.0.1 -p "$PGPORT"
