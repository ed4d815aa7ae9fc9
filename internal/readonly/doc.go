// Package readonly samples @@read_only on every site of a group, every
// 100 ms, for any test that moves a primary (the e2e suite, the real-MariaDB
// fleet test of package operator): Sampler keeps each tick's answers, marks
// a test's events on the same timeline, and reports any instant where two
// sites were writable at once (TwoWritable) and how long a site took to be
// fenced (FenceLatency).
//
// A site that does not answer within QueryBound is unknown in that tick,
// not writable: a paused or black-holed server cannot be sampled, and the
// test decides what an unknown means.
package readonly
