package middleware

// ResultOwner is the owner of the records an actor's calls claim: the
// black-box tests read the store's records by it.
var ResultOwner = resultOwner
