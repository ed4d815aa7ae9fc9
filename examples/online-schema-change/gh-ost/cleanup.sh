#!/bin/sh
# Removes what gh-ost left of an interrupted change of OSC_DATABASE.OSC_TABLE:
# its ghost table (_<table>_gho), its changelog (_<table>_ghc) and an old
# table it could not drop (_<table>_del). Run it only under authority: at
# the start of a run (migrate.sh does).
set -eu
: "${OSC_DEFAULTS_FILE:?}" "${OSC_DATABASE:?}" "${OSC_TABLE:?}"
sql() { "${MYSQL:-mysql}" --defaults-file="$OSC_DEFAULTS_FILE" -N -B -e "$1"; }
for table in "_${OSC_TABLE}_gho" "_${OSC_TABLE}_ghc" "_${OSC_TABLE}_del"; do
	if [ -n "$(sql "SHOW TABLES FROM \`$OSC_DATABASE\` LIKE '$table'")" ]; then
		echo "cleanup: dropping table $table left by an interrupted run" >&2
		sql "DROP TABLE IF EXISTS \`$OSC_DATABASE\`.\`$table\`"
	fi
done
