//go:build race

package middleware_test

// raceEnabled is true under -race, which slows the load tests tenfold:
// they run smaller there and at full size in a plain run.
const raceEnabled = true
