package jsonx

// Exact is exact, for the tests.
var Exact = exact
