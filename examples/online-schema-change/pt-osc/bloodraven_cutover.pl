# pt-online-schema-change plugin (--plugin): its before_swap_tables hook runs
# `bloodraven-deploy cut-over`, which returns 0 only once cutting over is
# safe and the DDL boundary is marked. Any other exit dies here, and
# pt-online-schema-change then stops before it swaps the tables (the
# original table is untouched; it drops its triggers and leaves its new
# table, which the next run's cleanup removes).
package pt_online_schema_change_plugin;

use strict;
use warnings;

sub new {
   my ($class, %args) = @_;
   return bless {%args}, $class;
}

sub before_swap_tables {
   my @cli = split ' ', ($ENV{BLOODRAVEN_DEPLOY} || 'bloodraven-deploy');
   my @flags = split ' ', ($ENV{BLOODRAVEN_CUT_OVER_FLAGS} || '');
   system(@cli, 'cut-over', @flags) == 0
      or die "bloodraven-deploy cut-over did not allow the cut-over (exit " . ($? >> 8) . "): not swapping the tables\n";
   return;
}

1;
