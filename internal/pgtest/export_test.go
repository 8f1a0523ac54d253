package pgtest

// HideDebianBinaries makes the helper look for PostgreSQL on PATH alone,
// and returns how to undo it.
func HideDebianBinaries() (restore func()) {
	old := debianBins
	debianBins = "/nonexistent/*/bin"
	return func() { debianBins = old }
}
