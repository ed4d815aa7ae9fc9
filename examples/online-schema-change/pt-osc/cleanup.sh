#!/bin/sh
# Removes what pt-online-schema-change left of an interrupted change of
# OSC_DATABASE.OSC_TABLE: its triggers first, then its new table. The
# triggers write every change of the original table into the new one, so
# dropping the table under them would break every write to the original.
# Run it only under authority: at the start of a run (migrate.sh does).
set -eu
: "${OSC_DEFAULTS_FILE:?}" "${OSC_DATABASE:?}" "${OSC_TABLE:?}"
sql() { "${MYSQL:-mysql}" --defaults-file="$OSC_DEFAULTS_FILE" -N -B -e "$1"; }
prefix=$(printf 'pt_osc_%s_%s' "$OSC_DATABASE" "$OSC_TABLE" | sed 's/[^A-Za-z0-9_]/_/g' | cut -c1-60)
for trigger in $(sql "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA='$OSC_DATABASE' AND EVENT_OBJECT_TABLE='$OSC_TABLE' AND TRIGGER_NAME LIKE '${prefix}\\_%'"); do
	echo "cleanup: dropping trigger $trigger left by an interrupted run" >&2
	sql "DROP TRIGGER IF EXISTS \`$OSC_DATABASE\`.\`$trigger\`"
done
for table in "_${OSC_TABLE}_new" "_${OSC_TABLE}_old"; do
	if [ -n "$(sql "SHOW TABLES FROM \`$OSC_DATABASE\` LIKE '$table'")" ]; then
		echo "cleanup: dropping table $table left by an interrupted run" >&2
		sql "DROP TABLE IF EXISTS \`$OSC_DATABASE\`.\`$table\`"
	fi
done
