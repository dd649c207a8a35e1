package graph

// emptyAsNull shows an optional string the Go model keeps as "" (receipts'
// transactionHash and amount) as null, as REST leaves it out.
func emptyAsNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
