// Package operation declares every operation of the service once: its name,
// the token guard, the rate-limit group, its REST route and its GraphQL root
// field. The doors are built from this table (rest registers exactly these
// routes with these guards and groups; graph charges each root field to its
// operation's budget) and tests hold the services and the schema to it.
//
// Authorize (authorize.go) is the one place a caller is admitted to an
// operation; the doors reach it through Admit, the services through Caller.
//
// Adding an operation: one entry in table below, the service method (which
// starts with Caller(ctx, entry)), and one line per door: rest's route list
// and the GraphQL resolver. See docs/architecture.md.
package operation

import (
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/ratelimit"
)

// Op is one operation.
type Op struct {
	// Name is the operation's name in logs, docs and test output; for a
	// GraphQL-only operation it also names its budget ("GraphQL <name>").
	Name string
	// Guard is the token check Authorize applies: REST before it reads a
	// body, the services (Caller) otherwise.
	Guard auth.Guard
	// Group is the rate-limit group whose size its budget has; "" for a
	// subscription, which spends no budget (its connections are capped).
	Group ratelimit.Group
	// REST is the route pattern ("METHOD /path", Go ServeMux syntax), ""
	// when the operation has no REST route. Aliases are further patterns
	// served by the same handler, sharing the budget.
	REST    string
	Aliases []string
	// GraphQL is the root field ("Query.x", "Mutation.x",
	// "Subscription.x"), "" when the operation has no GraphQL field.
	GraphQL string
	// Fields are nested GraphQL fields ("Business.x") that read what the
	// operation reads, so an API key reaches them exactly as it reaches
	// the operation.
	Fields []string
	// Scope is the API key scope that opens the operation to a business's
	// key; "" closes it to every key (an open operation stays open).
	// AdmitKey is the one check of it.
	Scope auth.Scope
}

// Budget names the rate-limit budget the operation spends: its REST route
// (so a GraphQL field and its REST twin share one budget), or "GraphQL
// <name>" for an operation only GraphQL serves.
func (o *Op) Budget() string {
	if o.REST != "" {
		return ratelimit.Operation(o.REST)
	}
	return "GraphQL " + o.Name
}

func (o *Op) String() string { return o.Name }

// The table. Keep entries grouped by domain; REST registers its routes in
// this order.
var (
	// Identity.
	SignUp = declare(&Op{Name: "signUp", Guard: auth.GuardOpen, Group: ratelimit.Auth,
		REST: "POST /api/v1/auth/sign-up", GraphQL: "Mutation.signUp"})
	SignIn = declare(&Op{Name: "signIn", Guard: auth.GuardOpen, Group: ratelimit.Auth,
		REST: "POST /api/v1/auth/sign-in", GraphQL: "Mutation.signIn"})
	// viewer reads the caller's own identity: the auth area.
	Viewer = declare(&Op{Name: "viewer", Guard: auth.GuardAny, Group: ratelimit.Auth,
		GraphQL: "Query.viewer"})

	// Voucher sessions (the spec counts them as voucher reads and writes).
	CreateSession = declare(&Op{Name: "createSession", Guard: auth.GuardRegistered, Group: ratelimit.VouchersWrite,
		REST: "POST /api/v1/vouchers/sessions/create-session", GraphQL: "Mutation.createSession"})
	GetSession = declare(&Op{Name: "voucherSession", Guard: auth.GuardRegistered, Group: ratelimit.VouchersRead,
		REST: "GET /api/v1/vouchers/sessions/{sessionId}", GraphQL: "Query.voucherSession"})
	CloseSession = declare(&Op{Name: "closeSession", Guard: auth.GuardRegistered, Group: ratelimit.VouchersWrite,
		REST: "POST /api/v1/vouchers/sessions/{sessionId}/close-session", GraphQL: "Mutation.closeSession"})
	// The payer's own session list has no REST twin.
	ListSessions = declare(&Op{Name: "voucherSessions", Guard: auth.GuardRegistered, Group: ratelimit.VouchersRead,
		GraphQL: "Query.voucherSessions"})

	// Businesses and members. The spec lists businesses at ".../businesses/";
	// {$} keeps that pattern from swallowing every path below it, and the
	// slash-less path is served too.
	CreateBusiness = declare(&Op{Name: "createBusiness", Guard: auth.GuardUser, Group: ratelimit.Businesses,
		REST: "POST /api/v1/businesses/create-business", GraphQL: "Mutation.createBusiness"})
	ListBusinesses = declare(&Op{Name: "businesses", Guard: auth.GuardUser, Group: ratelimit.Businesses,
		REST: "GET /api/v1/businesses/{$}", Aliases: []string{"GET /api/v1/businesses"}, GraphQL: "Query.businesses"})
	GetBusiness = declare(&Op{Name: "business", Guard: auth.GuardUser, Group: ratelimit.Businesses,
		REST: "GET /api/v1/businesses/{businessId}", GraphQL: "Query.business", Scope: auth.ScopeBusinessRead})
	UpdateBusiness = declare(&Op{Name: "updateBusiness", Guard: auth.GuardUser, Group: ratelimit.Businesses,
		REST: "POST /api/v1/businesses/{businessId}/update-business", GraphQL: "Mutation.updateBusiness"})
	UpdateBusinessStatus = declare(&Op{Name: "updateBusinessStatus", Guard: auth.GuardUser, Group: ratelimit.Businesses,
		REST: "POST /api/v1/businesses/{businessId}/update-status", GraphQL: "Mutation.updateBusinessStatus"})
	ListBusinessUsers = declare(&Op{Name: "listBusinessUsers", Guard: auth.GuardUser, Group: ratelimit.Businesses,
		REST:   "GET /api/v1/businesses/{businessId}/users",
		Fields: []string{"Business.members"}})
	AddBusinessUser = declare(&Op{Name: "addBusinessUser", Guard: auth.GuardUser, Group: ratelimit.Businesses,
		REST: "POST /api/v1/businesses/{businessId}/users/add-user", GraphQL: "Mutation.addBusinessUser"})
	UpdateBusinessUserStatus = declare(&Op{Name: "updateBusinessUserStatus", Guard: auth.GuardUser, Group: ratelimit.Businesses,
		REST: "POST /api/v1/businesses/{businessId}/users/{businessUserId}/update-status", GraphQL: "Mutation.updateBusinessUserStatus"})

	// A business's API keys: OWNER/ADMIN create and revoke, members list
	// (Business.apiKeys on GraphQL); never open to a key.
	CreateAPIKey = declare(&Op{Name: "createApiKey", Guard: auth.GuardUser, Group: ratelimit.Businesses,
		REST: "POST /api/v1/businesses/{businessId}/api-keys/create-api-key", GraphQL: "Mutation.createApiKey"})
	ListAPIKeys = declare(&Op{Name: "listApiKeys", Guard: auth.GuardUser, Group: ratelimit.Businesses,
		REST:   "GET /api/v1/businesses/{businessId}/api-keys",
		Fields: []string{"Business.apiKeys"}})
	RevokeAPIKey = declare(&Op{Name: "revokeApiKey", Guard: auth.GuardUser, Group: ratelimit.Businesses,
		REST: "POST /api/v1/businesses/{businessId}/api-keys/{keyId}/revoke-api-key", GraphQL: "Mutation.revokeApiKey"})

	// Webhook endpoints and deliveries.
	CreateEndpoint = declare(&Op{Name: "createEndpoint", Guard: auth.GuardUser, Group: ratelimit.Webhooks,
		REST: "POST /api/v1/businesses/{businessId}/webhook-endpoints/create-endpoint", GraphQL: "Mutation.createEndpoint", Scope: auth.ScopeWebhooksWrite})
	ListEndpoints = declare(&Op{Name: "listEndpoints", Guard: auth.GuardUser, Group: ratelimit.Webhooks,
		REST:   "GET /api/v1/businesses/{businessId}/webhook-endpoints",
		Fields: []string{"Business.webhookEndpoints"}, Scope: auth.ScopeWebhooksRead})
	GetEndpoint = declare(&Op{Name: "getEndpoint", Guard: auth.GuardUser, Group: ratelimit.Webhooks,
		REST: "GET /api/v1/businesses/{businessId}/webhook-endpoints/{endpointId}", Scope: auth.ScopeWebhooksRead})
	UpdateEndpoint = declare(&Op{Name: "updateEndpoint", Guard: auth.GuardUser, Group: ratelimit.Webhooks,
		REST: "POST /api/v1/businesses/{businessId}/webhook-endpoints/{endpointId}/update-endpoint", GraphQL: "Mutation.updateEndpoint", Scope: auth.ScopeWebhooksWrite})
	DeleteEndpoint = declare(&Op{Name: "deleteEndpoint", Guard: auth.GuardUser, Group: ratelimit.Webhooks,
		REST: "POST /api/v1/businesses/{businessId}/webhook-endpoints/{endpointId}/delete-endpoint", GraphQL: "Mutation.deleteEndpoint", Scope: auth.ScopeWebhooksWrite})
	RotateSecret = declare(&Op{Name: "rotateSecret", Guard: auth.GuardUser, Group: ratelimit.Webhooks,
		REST: "POST /api/v1/businesses/{businessId}/webhook-endpoints/{endpointId}/rotate-secret", GraphQL: "Mutation.rotateSecret", Scope: auth.ScopeWebhooksWrite})
	ListDeliveries = declare(&Op{Name: "webhookDeliveries", Guard: auth.GuardUser, Group: ratelimit.Webhooks,
		REST: "GET /api/v1/businesses/{businessId}/webhook-deliveries", GraphQL: "Query.webhookDeliveries", Scope: auth.ScopeWebhooksRead})
	GetDelivery = declare(&Op{Name: "getDelivery", Guard: auth.GuardUser, Group: ratelimit.Webhooks,
		REST: "GET /api/v1/businesses/{businessId}/webhook-deliveries/{deliveryId}", Scope: auth.ScopeWebhooksRead})
	RetryDelivery = declare(&Op{Name: "retryDelivery", Guard: auth.GuardUser, Group: ratelimit.Webhooks,
		REST: "POST /api/v1/businesses/{businessId}/webhook-deliveries/{deliveryId}/retry-delivery", GraphQL: "Mutation.retryDelivery", Scope: auth.ScopeWebhooksWrite})
	// The event log (Business.events on GraphQL) and its replay to an endpoint.
	ListEvents = declare(&Op{Name: "listEvents", Guard: auth.GuardUser, Group: ratelimit.Webhooks,
		REST:   "GET /api/v1/businesses/{businessId}/events",
		Fields: []string{"Business.events"}, Scope: auth.ScopeEventsRead})
	Replay = declare(&Op{Name: "replay", Guard: auth.GuardUser, Group: ratelimit.Webhooks,
		REST: "POST /api/v1/businesses/{businessId}/webhook-endpoints/{endpointId}/replay", GraphQL: "Mutation.replay", Scope: auth.ScopeWebhooksWrite})

	// Vouchers. interop-init submits a payer's signature: a voucher write,
	// like the spec's "sign".
	ReserveVoucher = declare(&Op{Name: "reserveVoucher", Guard: auth.GuardAny, Group: ratelimit.VouchersWrite,
		REST: "POST /api/v1/vouchers/reserve-voucher", GraphQL: "Mutation.reserveVoucher"})
	QueryVouchers = declare(&Op{Name: "vouchers", Guard: auth.GuardAny, Group: ratelimit.VouchersRead,
		REST: "GET /api/v1/vouchers", GraphQL: "Query.vouchers", Scope: auth.ScopeVouchersRead})
	GetVoucher = declare(&Op{Name: "voucher", Guard: auth.GuardAny, Group: ratelimit.VouchersRead,
		REST: "GET /api/v1/vouchers/{voucherId}", GraphQL: "Query.voucher", Scope: auth.ScopeVouchersRead})
	RedeemVoucher = declare(&Op{Name: "redeemVoucher", Guard: auth.GuardAny, Group: ratelimit.VouchersWrite,
		REST: "POST /api/v1/vouchers/{voucherId}/redeem-voucher", GraphQL: "Mutation.redeemVoucher"})
	NegotiateVoucher = declare(&Op{Name: "negotiateVoucher", Guard: auth.GuardAny, Group: ratelimit.Negotiate,
		REST: "POST /api/v1/vouchers/{voucherId}/negotiate-voucher", GraphQL: "Mutation.negotiateVoucher"})
	ResolveVoucher = declare(&Op{Name: "resolveVoucher", Guard: auth.GuardRegistered, Group: ratelimit.VouchersWrite,
		REST: "POST /api/v1/vouchers/{voucherId}/resolve-voucher", GraphQL: "Mutation.resolveVoucher"})
	DiscardVoucher = declare(&Op{Name: "discardVoucher", Guard: auth.GuardAny, Group: ratelimit.VouchersWrite,
		REST: "POST /api/v1/vouchers/{voucherId}/discard-voucher", GraphQL: "Mutation.discardVoucher"})
	InteropInit = declare(&Op{Name: "interopInit", Guard: auth.GuardAny, Group: ratelimit.VouchersWrite,
		REST: "POST /api/v1/vouchers/{voucherId}/submit/interop-init", GraphQL: "Mutation.interopInit"})
	// Who may follow which voucher is the voucher domain's rule (by id,
	// session or business); subscriptions spend no budget.
	VoucherUpdated = declare(&Op{Name: "voucherUpdated", Guard: auth.GuardAny,
		GraphQL: "Subscription.voucherUpdated"})

	// Finance.
	Currencies = declare(&Op{Name: "currencies", Guard: auth.GuardOpen, Group: ratelimit.Finance,
		REST: "GET /api/v1/finance/currencies", GraphQL: "Query.currencies"})
	Rates = declare(&Op{Name: "rates", Guard: auth.GuardOpen, Group: ratelimit.Finance,
		REST: "GET /api/v1/finance/rates", GraphQL: "Query.rates"})

	// The REST door's own OpenAPI document (no budget: a static file).
	// Widgets: the business manages them (members read, OWNER/ADMIN write);
	// the public routes take the widget's client secret or a member's
	// token, and the checkout routes the checkout token (the handlers check
	// both; their budget is counted per widget or per checkout).
	CreateWidget = declare(&Op{Name: "createWidget", Guard: auth.GuardUser, Group: ratelimit.Widgets,
		REST: "POST /api/v1/businesses/{businessId}/widgets/create-widget", GraphQL: "Mutation.createWidget", Scope: auth.ScopeWidgetsWrite})
	ListWidgets = declare(&Op{Name: "listWidgets", Guard: auth.GuardUser, Group: ratelimit.Widgets,
		REST:   "GET /api/v1/businesses/{businessId}/widgets",
		Fields: []string{"Business.widgets"}, Scope: auth.ScopeWidgetsRead})
	GetWidget = declare(&Op{Name: "getWidget", Guard: auth.GuardUser, Group: ratelimit.Widgets,
		REST: "GET /api/v1/businesses/{businessId}/widgets/{widgetId}", Scope: auth.ScopeWidgetsRead})
	UpdateWidget = declare(&Op{Name: "updateWidget", Guard: auth.GuardUser, Group: ratelimit.Widgets,
		REST: "POST /api/v1/businesses/{businessId}/widgets/{widgetId}/update-widget", GraphQL: "Mutation.updateWidget", Scope: auth.ScopeWidgetsWrite})
	RotateWidgetSecret = declare(&Op{Name: "rotateWidgetSecret", Guard: auth.GuardUser, Group: ratelimit.Widgets,
		REST: "POST /api/v1/businesses/{businessId}/widgets/{widgetId}/rotate-secret", GraphQL: "Mutation.rotateWidgetSecret", Scope: auth.ScopeWidgetsWrite})
	DeleteWidget = declare(&Op{Name: "deleteWidget", Guard: auth.GuardUser, Group: ratelimit.Widgets,
		REST: "POST /api/v1/businesses/{businessId}/widgets/{widgetId}/delete-widget", GraphQL: "Mutation.deleteWidget", Scope: auth.ScopeWidgetsWrite})
	WidgetConfig = declare(&Op{Name: "widgetConfig", Guard: auth.GuardWidgetClient, Group: ratelimit.WidgetsPublic,
		REST: "GET /api/v1/widgets/{widgetId}/config", Scope: auth.ScopeWidgetsRead})
	CreateCheckout = declare(&Op{Name: "createCheckout", Guard: auth.GuardWidgetClient, Group: ratelimit.WidgetsPublic,
		REST: "POST /api/v1/widgets/{widgetId}/create-checkout", Scope: auth.ScopeCheckoutsWrite})
	GetCheckout = declare(&Op{Name: "getCheckout", Guard: auth.GuardOpen, Group: ratelimit.WidgetsPublic,
		REST: "GET /api/v1/checkout/{token}"})
	SubmitPayment = declare(&Op{Name: "submitPayment", Guard: auth.GuardOpen, Group: ratelimit.WidgetsPublic,
		REST: "POST /api/v1/checkout/{token}/submit-payment"})

	OpenAPI = declare(&Op{Name: "openapi", Guard: auth.GuardOpen,
		REST: "GET /api/v1/openapi.json"})

	// The budget a GraphQL document spends when it is refused before any
	// field runs (it does not parse, validate, fit the bounds or the
	// complexity limit): its caller made the server read, parse and measure
	// it, and a client sending hostile documents back to back must run out
	// of budget as one sending costly fields does. Vouchers-read has the
	// largest burst of the spec's table. Not an operation a client names.
	RefusedDocument = declare(&Op{Name: "refused document", Guard: auth.GuardOpen, Group: ratelimit.VouchersRead})

	// Relay's node and nodes load any object by global id; each id is
	// charged to the REST read of its type (graph's node table), and an id
	// of no loadable type to node's own budget. Each loader applies its
	// type's guard, so the field itself is open.
	Node = declare(&Op{Name: "node", Guard: auth.GuardOpen, Group: ratelimit.VouchersRead,
		GraphQL: "Query.node"})
	Nodes = declare(&Op{Name: "nodes", Guard: auth.GuardOpen, Group: ratelimit.VouchersRead,
		GraphQL: "Query.nodes"})
)

// table lists every operation in declaration order.
var table []*Op

func declare(o *Op) *Op {
	table = append(table, o)
	return o
}

// All returns every operation, in table order.
func All() []*Op { return append([]*Op(nil), table...) }

var byField, byNested = map[string]*Op{}, map[string]*Op{}

// init runs after every declare above.
func init() {
	for _, o := range table {
		if o.GraphQL != "" {
			byField[o.GraphQL] = o
		}
		for _, f := range o.Fields {
			byNested[f] = o
		}
	}
}

// ByNestedField returns the operation whose reads a nested GraphQL field
// ("Business.x") makes.
func ByNestedField(field string) (*Op, bool) {
	o, ok := byNested[field]
	return o, ok
}

// ByField returns the operation of a GraphQL root field ("Query.x").
func ByField(field string) (*Op, bool) {
	o, ok := byField[field]
	return o, ok
}
