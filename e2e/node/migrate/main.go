// Command migrate is the node suite's stand-in for a migration tool: the
// README's Job runs `bloodraven-deploy run … -- migrate up`, and the suite
// builds that Job's image from this and bloodraven-deploy. It changes no
// schema.
//
//	migrate up                 prints what it was asked and exits 0;
//	migrate hold DURATION OP   records OP's start in the table runs of the
//	                           database $MIGRATE_RECORD_DSN names, sleeps
//	                           DURATION, records its end and exits 0: the
//	                           suite reads the intervals back to check that
//	                           no two commands ran at once.
package main

import (
	"database/sql"
	"fmt"
	"os"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql"
)

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "hold" {
		if err := hold(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "migrate hold:", err)
			os.Exit(1)
		}
		return
	}
	fmt.Printf("migrate %s: nothing to apply (the node suite's stand-in for a migration tool)\n", strings.Join(os.Args[1:], " "))
}

func hold(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("usage: migrate hold DURATION OP")
	}
	d, err := time.ParseDuration(args[0])
	if err != nil {
		return err
	}
	db, err := sql.Open("mysql", os.Getenv("MIGRATE_RECORD_DSN"))
	if err != nil {
		return err
	}
	defer db.Close()
	res, err := db.Exec("INSERT INTO runs (op, started) VALUES (?, NOW(6))", args[1])
	if err != nil {
		return fmt.Errorf("record the start: %w", err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return err
	}
	fmt.Printf("migrate hold: %s started, holding %s\n", args[1], d)
	time.Sleep(d)
	if _, err := db.Exec("UPDATE runs SET ended = NOW(6) WHERE id = ?", id); err != nil {
		return fmt.Errorf("record the end: %w", err)
	}
	fmt.Printf("migrate hold: %s ended\n", args[1])
	return nil
}
