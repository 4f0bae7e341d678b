#!/bin/sh
# Stand-in for the official mariadb image's entrypoint, for hosts that cannot pull it (CI here):
# the variables deploy/compose/compose.yaml uses, nothing more.
set -e
from_file() {
  eval "file=\${${1}_FILE:-}"
  if [ -n "$file" ]; then
    value=$(cat "$file")
    eval "$1=\$value"
  fi
}
from_file MARIADB_PASSWORD
from_file MARIADB_ROOT_PASSWORD
if [ ! -d /var/lib/mysql/mysql ]; then
  chown mysql:mysql /var/lib/mysql
  mariadb-install-db --user=mysql --datadir=/var/lib/mysql --skip-test-db >/dev/null
  mariadbd --user=mysql --skip-networking --socket=/run/mysqld/init.sock &
  pid=$!
  for _ in $(seq 1 60); do
    mariadb --socket=/run/mysqld/init.sock -uroot -e 'SELECT 1' >/dev/null 2>&1 && break
    sleep 1
  done
  root_password=${MARIADB_ROOT_PASSWORD:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}
  mariadb --socket=/run/mysqld/init.sock -uroot <<SQL
CREATE DATABASE IF NOT EXISTS \`$MARIADB_DATABASE\`;
CREATE USER '$MARIADB_USER'@'%' IDENTIFIED BY '$MARIADB_PASSWORD';
GRANT ALL ON \`$MARIADB_DATABASE\`.* TO '$MARIADB_USER'@'%';
ALTER USER root@localhost IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('$root_password');
SQL
  kill "$pid"
  wait "$pid" || true
fi
exec "$@" --user=mysql --bind-address=0.0.0.0 --skip-name-resolve
