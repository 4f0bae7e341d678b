#!/bin/sh
# Stand-in for the official image's healthcheck.sh (--connect, --innodb_initialized).
exec mariadb --socket=/run/mysqld/mysqld.sock -uroot -e \
  "SELECT 1 FROM information_schema.ENGINES WHERE ENGINE='InnoDB' AND SUPPORT IN ('YES','DEFAULT')" >/dev/null
