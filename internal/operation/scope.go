package operation

import (
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
)

// AdmitKey is Authorize for a business's API key: its scopes stand where
// another caller's token kind does. An open operation admits every key; one that
// names no scope admits none (member and key management, a business's
// settings, a payer's or payee's voucher work); otherwise the key must
// hold the operation's scope, and a missing one is forbidden with the
// scope named in details. Which business the key reaches is the domain's
// rule (business.Caller: another business is not_found).
func AdmitKey(op *Op, p *auth.Principal) error {
	switch {
	case !p.IsAPIKey() || op.Guard == auth.GuardOpen:
		return nil
	case op.Scope == "":
		return apperr.Newf(apperr.Forbidden, "%s is not open to API keys", op.Name)
	case !p.HasScope(op.Scope):
		return &apperr.Error{Code: apperr.Forbidden, Message: "the API key does not hold the scope " + string(op.Scope),
			Details: []apperr.Detail{{Field: "scope", Reason: "needs " + string(op.Scope)}}}
	}
	return nil
}
