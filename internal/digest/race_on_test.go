//go:build race

package digest_test

// raceEnabled is set under the race detector, which slows the package's
// measurements tenfold: they run on smaller inputs there.
const raceEnabled = true
