#!/usr/bin/env bash
# Installs a jobfleet agent as a systemd service on a host without the Debian package:
#   install-agent.sh --admins URL[,URL…] --group APP_NAME --token TOKEN [--mode auto|connect|push]
#                    [--binary PATH] [--run-as USER] [--no-start]
#   install-agent.sh --uninstall [--purge]
# Idempotent: running it again updates the binary and config and restarts the agent. The token
# goes to /etc/default/jobfleet-agent (0600), not to the config. --binary defaults to a
# jobfleet-agent next to this script, then the one on PATH. Run as root.
set -euo pipefail

admins="" group="" token="" mode="auto" binary="" run_as="jobfleet-jobs" start=true
uninstall=false purge=false
prefix=${JOBFLEET_INSTALL_ROOT:-}
usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
fail() { echo "install-agent.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --admins) admins=${2:-}; shift 2 ;;
    --group) group=${2:-}; shift 2 ;;
    --token) token=${2:-}; shift 2 ;;
    --mode) mode=${2:-}; shift 2 ;;
    --binary) binary=${2:-}; shift 2 ;;
    --run-as) run_as=${2:-}; shift 2 ;;
    --no-start) start=false; shift ;;
    --uninstall) uninstall=true; shift ;;
    --purge) purge=true; shift ;;
    -h|--help) usage ;;
    *) fail "unknown argument \`$1\` (see --help)" ;;
  esac
done
[ "$(id -u)" = 0 ] || fail "run as root (it installs a system service)"
systemd_up() { [ -d /run/systemd/system ]; }
unit=$prefix/etc/systemd/system/jobfleet-agent.service

if $uninstall; then
  if systemd_up; then systemctl disable --now jobfleet-agent.service 2>/dev/null || true; fi
  rm -f "$unit" "$prefix/usr/local/bin/jobfleet-agent" "$prefix/etc/default/jobfleet-agent"
  if $purge; then
    rm -rf "$prefix/var/lib/jobfleet-agent" "$prefix/etc/jobfleet/agent.toml"
  fi
  if systemd_up; then systemctl daemon-reload; fi
  echo "jobfleet-agent removed${purge:+}$($purge && echo ', with its data and config')"
  exit 0
fi

[ -n "$admins" ] || fail "--admins is required (the admin URLs, comma-separated)"
[ -n "$group" ] || fail "--group is required (the group's app name)"
[ -n "$token" ] || fail "--token is required (the admins' access_token)"
case $mode in auto|connect|push) ;; *) fail "--mode must be auto, connect or push, not \`$mode\`" ;; esac
case $group in *[!A-Za-z0-9._-]*) fail "--group may contain only letters, digits, -, _ and ." ;; esac
case $token in *[[:space:]]*|*\"*|*\\*) fail "--token must not contain spaces, quotes or backslashes" ;; esac
[ ${#token} -ge 16 ] || fail "--token is shorter than 16 characters: the admins would not use it"
if [ -z "$binary" ]; then
  here=$(dirname "$(readlink -f "$0")")
  if [ -x "$here/jobfleet-agent" ]; then binary=$here/jobfleet-agent
  else binary=$(command -v jobfleet-agent || true); fi
fi
[ -n "$binary" ] && [ -x "$binary" ] || fail "no jobfleet-agent binary: pass --binary PATH"
"$binary" --version >/dev/null || fail "$binary does not run on this host"

# The admins list as TOML: ["http://a:8080/", …]
admin_list=""
IFS=, read -ra urls <<<"$admins"
for url in "${urls[@]}"; do
  case $url in http://*|https://*) ;; *) fail "admin URL \`$url\` is not http:// or https://" ;; esac
  admin_list="$admin_list${admin_list:+, }\"$url\""
done

if ! getent passwd "$run_as" >/dev/null; then
  useradd --system --user-group --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin "$run_as"
fi
install -d -m 0755 "$prefix/usr/local/bin" "$prefix/etc/jobfleet" "$prefix/etc/systemd/system" "$prefix/etc/default"
install -d -m 0700 "$prefix/var/lib/jobfleet-agent"
# Replaced by rename, so a running agent keeps its old binary until it restarts.
install -m 0755 "$binary" "$prefix/usr/local/bin/.jobfleet-agent.new"
mv -f "$prefix/usr/local/bin/.jobfleet-agent.new" "$prefix/usr/local/bin/jobfleet-agent"
umask 077
cat >"$prefix/etc/jobfleet/agent.toml" <<CONFIG
# Written by install-agent.sh; running it again rewrites this file. Every key is described in
# the README (Agent) and deploy/agent.example.toml.
admins = [$admin_list]
group = "$group"
mode = "$mode"
data_dir = "/var/lib/jobfleet-agent"
run_as = "$run_as"
allow_root = true
CONFIG
printf 'JOBFLEET_AGENT_TOKEN=%s\n' "$token" >"$prefix/etc/default/jobfleet-agent"
umask 022
# The packaged unit, with this script's binary path.
cat >"$unit" <<'UNIT'
# jobfleet agent: runs the jobs the admins send to this host. Installed by the jobfleet-agent
# package or deploy/install-agent.sh; config in /etc/jobfleet/agent.toml, data (logs, spooled
# results, the accept journal, its key) in /var/lib/jobfleet-agent, its own log to the journal.
[Unit]
Description=jobfleet agent (runs scheduled jobs on this host)
Documentation=file:///usr/share/doc/jobfleet-agent/README.md
After=network-online.target
Wants=network-online.target

[Service]
Type=exec
# Root, so that it can run each job as its run_as user and put each run in its own cgroup; jobs
# themselves run as run_as (agent.toml), never as root unless allow_root says so.
User=root
Environment=JOBFLEET_AGENT_CONFIG=/etc/jobfleet/agent.toml
# The token (JOBFLEET_AGENT_TOKEN=…) belongs here, mode 0600, rather than in agent.toml.
EnvironmentFile=-/etc/default/jobfleet-agent
ExecStart=/usr/bin/jobfleet-agent
WorkingDirectory=/var/lib/jobfleet-agent
StateDirectory=jobfleet-agent
StateDirectoryMode=0700
# cgroup v2: the agent creates one cgroup per run below its own; systemd hands it the subtree.
Delegate=yes
# Stopping or restarting the agent must neither orphan nor lose runs. SIGTERM goes to the agent
# alone (mixed): it deregisters, refuses new triggers, lets running jobs finish for
# shutdown_grace_s (30 s), kills what is left and spools every result, which it sends after the
# restart. Only if it has not exited by TimeoutStopSec does systemd kill the whole group.
# KillMode=process would leave jobs running unsupervised (the next agent reports them lost);
# control-group would kill them at once, without their results.
KillMode=mixed
TimeoutStopSec=45s
Restart=on-failure
# Exit status 2 is a configuration error: restarting would not fix it.
RestartPreventExitStatus=2
RestartSec=2s
LimitNOFILE=65536
# Jobs may use setuid tools (sudo) and write anywhere their user may: the agent is not
# sandboxed the way the admin is; the jobs' own user and limits are the boundary.
ProtectHome=no
PrivateTmp=no

[Install]
WantedBy=multi-user.target
UNIT
sed -i "s#^ExecStart=/usr/bin/jobfleet-agent#ExecStart=/usr/local/bin/jobfleet-agent#" "$unit"
# Checked before anything starts: a bad value is named now, not in a restart loop.
JOBFLEET_AGENT_TOKEN=$token "$prefix/usr/local/bin/jobfleet-agent" --config "$prefix/etc/jobfleet/agent.toml" --check-config \
  || fail "the agent refuses this configuration (above)"
if systemd_up; then
  systemctl daemon-reload
  systemctl enable jobfleet-agent.service
  if $start; then systemctl restart jobfleet-agent.service; fi
  echo "jobfleet-agent installed and $($start && echo started || echo enabled); logs: journalctl -u jobfleet-agent"
else
  echo "jobfleet-agent installed; systemd is not running here, so start it yourself:"
  echo "  JOBFLEET_AGENT_TOKEN=… /usr/local/bin/jobfleet-agent --config /etc/jobfleet/agent.toml"
fi
