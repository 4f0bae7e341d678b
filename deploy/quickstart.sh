#!/usr/bin/env bash
# One command for a fresh machine: builds jobfleet, starts the admin on SQLite (./data) and an
# agent beside it, creates the group `default` on first start, and prints the login.
# Ctrl-C stops both. Needs only Rust; run from anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --workspace --bins
mkdir -p data
listen=${JOBFLEET_LISTEN:-127.0.0.1:8080}
agent_listen=${JOBFLEET_AGENT_LISTEN:-127.0.0.1:9999}
first_start=false
[ -f data/jobfleet.db ] || first_start=true
password=${JOBFLEET_ADMIN_PASSWORD:-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')}

# One machine, one agent started right here: it is approved as it enrolls. A fleet keeps the
# default (approve_agents = "manual") and approves each agent in the console.
JOBFLEET_LISTEN=$listen JOBFLEET_ADMIN_PASSWORD=$password JOBFLEET_APPROVE_AGENTS=auto \
  ./target/debug/jobfleet-admin serve >data/admin.out 2>&1 &
admin_pid=$!
agent_pid=
trap 'kill $admin_pid $agent_pid 2>/dev/null; wait 2>/dev/null' EXIT INT TERM

for _ in $(seq 1 100); do
  ./target/debug/jobfleet-admin healthcheck --url "http://$listen" >/dev/null 2>&1 && break
  kill -0 $admin_pid 2>/dev/null || { cat data/admin.out; exit 1; }
  sleep 0.2
done

if $first_start; then
  token=$(curl -fsS -XPOST "http://$listen/api/v1/auth/token" -H 'content-type: application/json' \
    -d "{\"username\":\"admin\",\"password\":\"$password\"}" | sed 's/.*"token":"\([^"]*\)".*/\1/')
  curl -fsS -XPOST "http://$listen/api/v1/groups" -H "authorization: Bearer $token" \
    -H 'content-type: application/json' -d '{"app_name":"default","title":"Default group"}' >/dev/null
fi

root_flag=
[ "$(id -u)" = 0 ] && root_flag=--allow-root
JOBFLEET_AGENT_ADMINS="http://$listen/" JOBFLEET_AGENT_GROUP=default JOBFLEET_AGENT_LISTEN=$agent_listen \
JOBFLEET_AGENT_TOKEN=$(cat data/access.token) JOBFLEET_AGENT_DATA_DIR=data/agent \
  ./target/debug/jobfleet-agent $root_flag >data/agent.out 2>&1 &
agent_pid=$!

echo
echo "jobfleet is running: console http://$listen/console, admin API http://$listen (docs at /api/docs), agent $agent_listen in group 'default'"
if $first_start; then
  echo "login: admin / $password"
else
  echo "login: admin / the password printed on first start (or set with: ./target/debug/jobfleet-admin user passwd admin --password-stdin)"
fi
echo "logs: data/admin.out, data/agent.out. Ctrl-C stops both."
wait $admin_pid
