#!/bin/sh
# An online schema change with pt-online-schema-change, run inside
# `bloodraven-deploy run` (docs/online-schema-change.md):
#
#   bloodraven-deploy run --group orders --instance orders-app --operation-id "$REV-$RUN" \
#     -- examples/online-schema-change/pt-osc/migrate.sh
#
# The copy may run for hours under the failover-hold; a loss during it is a
# loss before the DDL boundary (exit 4, no gate). The cut-over happens only
# once `bloodraven-deploy cut-over` (the plugin's before_swap_tables hook)
# says it is safe, and that marks the boundary.
#
# Environment:
#   OSC_DEFAULTS_FILE  a client option file ([client] host, port or socket,
#                      user, password) for the primary: read by the mysql
#                      client and by pt-online-schema-change (F=)
#   OSC_DATABASE, OSC_TABLE, OSC_ALTER   what to change, e.g. "ADD COLUMN c INT"
#   OSC_PT_FLAGS       more pt-online-schema-change flags (throttling: --sleep,
#                      --chunk-size, --max-load); optional
#   BLOODRAVEN_DEPLOY  how to call the CLI; default bloodraven-deploy
#   BLOODRAVEN_CUT_OVER_FLAGS  flags for `bloodraven-deploy cut-over`, e.g.
#                      "--budget 20s --timeout 2h"; optional
#   MYSQL              the client; default mysql
set -eu
here=$(cd "$(dirname "$0")" && pwd)
: "${OSC_DEFAULTS_FILE:?}" "${OSC_DATABASE:?}" "${OSC_TABLE:?}" "${OSC_ALTER:?}"
export BLOODRAVEN_DEPLOY="${BLOODRAVEN_DEPLOY:-bloodraven-deploy}"

# 1. What an earlier run left when it lost its authority mid-copy: this run
# holds the mutex at the grant's generation, so it may remove it.
"$here/cleanup.sh"

# 2. The copy, then the cut-over, which the plugin holds until it is safe.
# The new table has a fixed name, so a leftover is found by the next run.
# shellcheck disable=SC2086 # OSC_PT_FLAGS is a list of flags
exec pt-online-schema-change --no-version-check --recursion-method=none \
	--new-table-name '_%T_new' --plugin "$here/bloodraven_cutover.pl" \
	--alter "$OSC_ALTER" ${OSC_PT_FLAGS:-} \
	--execute "F=$OSC_DEFAULTS_FILE,D=$OSC_DATABASE,t=$OSC_TABLE"
