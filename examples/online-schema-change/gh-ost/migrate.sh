#!/bin/sh
# An online schema change with gh-ost, run inside `bloodraven-deploy run`
# with gh-ost's postpone flag file (docs/online-schema-change.md):
#
#   bloodraven-deploy run --group orders --instance orders-app --operation-id "$REV-$RUN" \
#     --postpone-flag-file "$TMPDIR/gh-ost.postpone" \
#     -- examples/online-schema-change/gh-ost/migrate.sh
#
# The run creates the flag file before gh-ost starts. When gh-ost's copy is
# complete it runs the gh-ost-on-begin-postponed hook (hooks/), which tells
# the run; from then on the run removes the file only while cutting over is
# safe, marking the DDL boundary first, and puts it back when it is not.
#
# Environment:
#   OSC_DEFAULTS_FILE, OSC_DATABASE, OSC_TABLE, OSC_ALTER   as for pt-osc/migrate.sh
#   OSC_HOST, OSC_PORT, OSC_USER, OSC_PASSWORD              gh-ost's connection (it reads no option file)
#   GHOST          how to call gh-ost (or a stand-in); default gh-ost
#   GHOST_FLAGS    more gh-ost flags (throttling, --allow-on-master or a replica); optional
#   BLOODRAVEN_POSTPONE_FLAG_FILE   the run's --postpone-flag-file
set -eu
here=$(cd "$(dirname "$0")" && pwd)
: "${OSC_DEFAULTS_FILE:?}" "${OSC_DATABASE:?}" "${OSC_TABLE:?}" "${OSC_ALTER:?}" "${BLOODRAVEN_POSTPONE_FLAG_FILE:?}"
export BLOODRAVEN_DEPLOY="${BLOODRAVEN_DEPLOY:-bloodraven-deploy}"

# 1. What an earlier run left (its _gho and _ghc tables), under this run's
# authority. gh-ost has no triggers: the tables go in any order.
"$here/cleanup.sh"

# 2. The copy; gh-ost cuts over only once the flag file is gone.
# shellcheck disable=SC2086 # GHOST_FLAGS is a list of flags
exec ${GHOST:-gh-ost} --host="${OSC_HOST:-127.0.0.1}" --port="${OSC_PORT:-3306}" --user="${OSC_USER:-}" --password="${OSC_PASSWORD:-}" \
	--database="$OSC_DATABASE" --table="$OSC_TABLE" --alter="$OSC_ALTER" \
	--postpone-cut-over-flag-file="$BLOODRAVEN_POSTPONE_FLAG_FILE" --hooks-path="$here/hooks" \
	--ok-to-drop-table ${GHOST_FLAGS:-} --execute
