package seam

// Seal and Open seal bytes under an engine's result key (AES-GCM, the key's
// id kept with them), bound to a context string, and open them again: for
// what an in-process bridge keeps outside the engine (the MCP bridge's
// request state and the arguments of a call to resume). engine is a
// *middleware.Engine; an engine without a result key fails. Installed by
// package middleware.
var (
	Seal func(engine any, plain []byte, context string) ([]byte, error)
	Open func(engine any, sealed []byte, context string) ([]byte, error)
)
