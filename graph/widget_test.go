package graph_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/voucherd/voucherd/testsupport/testdb"
	"github.com/voucherd/voucherd/testsupport/testserver"
)

const widgetFields = `id businessId name status accepts { network currency } wallets { network address } createdAt updatedAt`

// The widget mutations and the business's widgets connection, with their
// errors, through the same service as REST, on both databases.
func TestWidgetsGraphQL(t *testing.T) {
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			srv := testserver.Start(t, testserver.Options{Dialect: dialect})
			owner, member, stranger := srv.User(t), srv.User(t), srv.User(t)
			g := srv.GraphQL(t, owner.Token, `mutation($n: String!) { createBusiness(input: {name: $n}) { id } }`, map[string]any{"n": "Acme"})
			var biz struct {
				CreateBusiness struct{ ID string } `json:"createBusiness"`
			}
			mustData(t, g, &biz)
			bid := biz.CreateBusiness.ID
			g = srv.GraphQL(t, owner.Token, `mutation($b: ID!, $e: String!) { addBusinessUser(businessId: $b, input: {email: $e, role: MEMBER}) { id } }`,
				map[string]any{"b": bid, "e": member.Email})
			mustData(t, g, nil)

			input := map[string]any{
				"name":    "Shop",
				"accepts": []map[string]any{{"network": "ethereum", "currency": "USDC"}},
				"wallets": []map[string]any{{"network": "ethereum", "address": "0x52908400098527886e0f7030069857d2e4169ee7"}},
			}
			create := `mutation($b: ID!, $in: CreateWidgetInput!) { createWidget(businessId: $b, input: $in) { ` + widgetFields + ` clientSecret } }`
			g = srv.GraphQL(t, member.Token, create, map[string]any{"b": bid, "in": input})
			if g.ErrorCode() != "forbidden" {
				t.Fatalf("member createWidget: %+v", g.Errors)
			}
			g = srv.GraphQL(t, stranger.Token, create, map[string]any{"b": bid, "in": input})
			if g.ErrorCode() != "not_found" {
				t.Fatalf("stranger createWidget: %+v", g.Errors)
			}
			badIn := map[string]any{"name": "x", "accepts": []map[string]any{{"network": "ethereum", "currency": "NOPE"}}, "wallets": []map[string]any{}}
			g = srv.GraphQL(t, owner.Token, create, map[string]any{"b": bid, "in": badIn})
			if g.ErrorCode() != "validation_failed" {
				t.Fatalf("bad createWidget: %+v", g.Errors)
			}
			g = srv.GraphQL(t, owner.Token, create, map[string]any{"b": bid, "in": input})
			var created struct {
				CreateWidget struct {
					ID, Name, Status, ClientSecret string
					Wallets                        []struct{ Address string }
				} `json:"createWidget"`
			}
			mustData(t, g, &created)
			w := created.CreateWidget
			if !strings.HasPrefix(w.ID, "wgt_") || !strings.HasPrefix(w.ClientSecret, "wcs_") || w.Status != "ACTIVE" ||
				w.Wallets[0].Address != "0x52908400098527886E0F7030069857D2E4169EE7" {
				t.Fatalf("createWidget: %s", g.Data)
			}

			// The secret works on REST's public routes.
			r := srv.Do(t, "GET", "/api/v1/widgets/"+w.ID+"/config", member.Token, nil)
			if r.Status != 200 {
				t.Fatalf("config with member token: %d %s", r.Status, r.Body)
			}

			g = srv.GraphQL(t, owner.Token, `mutation($b: ID!, $id: ID!) { updateWidget(businessId: $b, id: $id, input: {name: "Shop 2", status: INACTIVE}) { name status } }`,
				map[string]any{"b": bid, "id": w.ID})
			var upd struct {
				UpdateWidget struct{ Name, Status string } `json:"updateWidget"`
			}
			mustData(t, g, &upd)
			if upd.UpdateWidget.Name != "Shop 2" || upd.UpdateWidget.Status != "INACTIVE" {
				t.Fatalf("updateWidget: %s", g.Data)
			}

			// The connection and node(id:): members see, strangers do not.
			list := `query($b: ID!) { business(id: $b) { widgets(first: 10) { totalCount edges { node { ` + widgetFields + ` } } } } }`
			g = srv.GraphQL(t, member.Token, list, map[string]any{"b": bid})
			var conn struct {
				Business struct {
					Widgets struct {
						TotalCount int
						Edges      []struct{ Node struct{ ID, Name string } }
					}
				}
			}
			mustData(t, g, &conn)
			if conn.Business.Widgets.TotalCount != 1 || conn.Business.Widgets.Edges[0].Node.ID != w.ID || conn.Business.Widgets.Edges[0].Node.Name != "Shop 2" {
				t.Fatalf("widgets connection: %s", g.Data)
			}
			if strings.Contains(string(g.Data), "wcs_") {
				t.Fatal("the connection shows a secret")
			}
			node := `query($id: ID!) { node(id: $id) { ... on Widget { id name } } }`
			g = srv.GraphQL(t, member.Token, node, map[string]any{"id": w.ID})
			if !strings.Contains(string(g.Data), w.ID) {
				t.Fatalf("member node: %s %+v", g.Data, g.Errors)
			}
			g = srv.GraphQL(t, stranger.Token, node, map[string]any{"id": w.ID})
			if string(g.Data) != `{"node":null}` {
				t.Fatalf("stranger node: %s", g.Data)
			}

			rotate := `mutation($b: ID!, $id: ID!) { rotateWidgetSecret(businessId: $b, id: $id) { id clientSecret } }`
			g = srv.GraphQL(t, member.Token, rotate, map[string]any{"b": bid, "id": w.ID})
			if g.ErrorCode() != "forbidden" {
				t.Fatalf("member rotate: %+v", g.Errors)
			}
			g = srv.GraphQL(t, owner.Token, rotate, map[string]any{"b": bid, "id": w.ID})
			var rot struct {
				RotateWidgetSecret struct{ ID, ClientSecret string } `json:"rotateWidgetSecret"`
			}
			mustData(t, g, &rot)
			if rot.RotateWidgetSecret.ClientSecret == w.ClientSecret || !strings.HasPrefix(rot.RotateWidgetSecret.ClientSecret, "wcs_") {
				t.Fatalf("rotate: %s", g.Data)
			}

			del := `mutation($b: ID!, $id: ID!) { deleteWidget(businessId: $b, id: $id) }`
			g = srv.GraphQL(t, owner.Token, del, map[string]any{"b": bid, "id": "wgt_nope"})
			if g.ErrorCode() != "not_found" {
				t.Fatalf("delete unknown: %+v", g.Errors)
			}
			g = srv.GraphQL(t, owner.Token, del, map[string]any{"b": bid, "id": w.ID})
			if string(g.Data) != `{"deleteWidget":"`+w.ID+`"}` {
				t.Fatalf("deleteWidget: %s %+v", g.Data, g.Errors)
			}
			r = srv.Do(t, "GET", "/api/v1/businesses/"+bid+"/widgets", owner.Token, nil)
			if r.Status != 200 || string(r.Body) != "[]" {
				t.Fatalf("REST list after GraphQL delete: %d %s", r.Status, r.Body)
			}
		})
	}
}

func mustData(t *testing.T, g *testserver.GraphQLResult, v any) {
	t.Helper()
	if len(g.Errors) > 0 {
		t.Fatalf("graphql errors: %+v", g.Errors)
	}
	if v != nil {
		if err := json.Unmarshal(g.Data, v); err != nil {
			t.Fatalf("data %s: %v", g.Data, err)
		}
	}
}
