package graph

import (
	"sort"
	"testing"

	"github.com/voucherd/voucherd/graph/generated"
	"github.com/voucherd/voucherd/internal/ids"
)

// nodePrefixes names the id prefix of every type implementing Node.
var nodePrefixes = map[string]string{
	"Voucher":         ids.Voucher,
	"VoucherSession":  ids.Session,
	"Business":        ids.Business,
	"BusinessUser":    ids.BusinessUser,
	"WebhookEndpoint": ids.WebhookEndpoint,
	"WebhookDelivery": ids.Delivery,
	"Event":           ids.Event,
	"DeliveryAttempt": ids.DeliveryAttempt,
	"User":            ids.User,
	"Device":          ids.Device,
	"Widget":          ids.Widget,
}

// notRefetchable are Node types node(id:) deliberately answers null for,
// with the reason. Everything else must have a loader.
var notRefetchable = map[string]string{
	"User":            "accounts are not browsable; the caller's own is viewer",
	"Device":          "accounts are not browsable; the caller's own is viewer",
	"DeliveryAttempt": "attempts are read through their delivery's attemptLog",
}

// Every Node type is either loadable by node(id:) (through its service, so
// visibility holds) or listed as not refetchable: a new Node type cannot
// slip in with node(id:) silently returning null.
func TestEveryNodeTypeIsLoadable(t *testing.T) {
	schema := generated.NewExecutableSchema(generated.Config{Resolvers: &Resolver{}}).Schema()
	loaders := (&Resolver{}).nodeLoaders()
	var types []string
	for _, def := range schema.Types {
		for _, i := range def.Interfaces {
			if i == "Node" {
				types = append(types, def.Name)
			}
		}
	}
	sort.Strings(types)
	if len(types) == 0 {
		t.Fatal("no Node types found")
	}
	for _, name := range types {
		prefix, ok := nodePrefixes[name]
		if !ok {
			t.Errorf("Node type %s: add its id prefix to nodePrefixes", name)
			continue
		}
		_, loadable := loaders[prefix]
		_, excused := notRefetchable[name]
		switch {
		case !loadable && !excused:
			t.Errorf("Node type %s (%s): no node(id:) loader in graph/node.go", name, prefix)
		case loadable && excused:
			t.Errorf("Node type %s has a loader but is listed as not refetchable", name)
		}
	}
}
