// Package widget lets a business take payments from its own customers
// (docs/widgets.md). A widget names the
// tokens it accepts and a payout wallet for each network; the business's
// server holds its client secret and creates checkouts, business vouchers
// made REDEEMED as SIMPLE by the voucher service; the customer pays on the
// hosted page, which holds the checkout token, a capability for that one
// voucher.
//
// The package owns who may do what: members read widgets, OWNER and ADMIN
// write them; a public operation takes the widget's client secret or an
// ACTIVE member's token. Secrets and checkout tokens are stored only as
// hashes and never logged.
package widget

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/voucherd/voucherd/ent"
	entbusiness "github.com/voucherd/voucherd/ent/business"
	"github.com/voucherd/voucherd/ent/businessuser"
	"github.com/voucherd/voucherd/ent/vouchersession"
	entwidget "github.com/voucherd/voucherd/ent/widget"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/chain"
	"github.com/voucherd/voucherd/internal/finance"
	"github.com/voucherd/voucherd/internal/ids"
	"github.com/voucherd/voucherd/internal/operation"
	"github.com/voucherd/voucherd/internal/payment"
	"github.com/voucherd/voucherd/internal/session"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/internal/voucher"
)

// Bounds (docs/widgets.md).
const (
	MaxNameLength         = 128
	MaxAccepts            = 20
	MaxReferenceLength    = 128
	MaxWidgetsPerBusiness = 32
)

// Options are the service's collaborators; Vouchers and Finance are
// required.
type Options struct {
	Vouchers *voucher.Service
	Finance  *finance.Service
	// PublicURL is the service's public base URL (VOUCHER_PUBLIC_URL,
	// e.g. https://pay.example.com); checkout URLs are made from it. Empty:
	// create-checkout answers the path and the door completes it.
	PublicURL string
	Now       func() time.Time
	Log       *slog.Logger
}

// Service manages widgets and serves their public operations.
type Service struct {
	db        *storage.DB
	vouchers  *voucher.Service
	reg       *finance.Registry
	publicURL string
	now       func() time.Time
	log       *slog.Logger
}

// NewService returns the widget service over db.
func NewService(db *storage.DB, o Options) (*Service, error) {
	if o.Vouchers == nil || o.Finance == nil {
		return nil, fmt.Errorf("widget: Vouchers and Finance are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Service{db: db, vouchers: o.Vouchers, reg: o.Finance.Registry(), publicURL: strings.TrimRight(o.PublicURL, "/"), now: o.Now, log: o.Log}, nil
}

// WithSecret is a widget with the client secret it was just given: the
// answer to create-widget and rotate-secret, the only time the secret is
// shown (REST renders it with view.OfWidgetWithSecret; GraphQL's
// WidgetWithSecret binds to it).
type WithSecret struct {
	*ent.Widget
	ClientSecret string
}

// CreateInput is the create-widget body.
type CreateInput struct {
	Name    *string                 `json:"name"`
	Status  *entwidget.Status       `json:"status,omitempty"`
	Accepts []payment.Accept        `json:"accepts"`
	Wallets []payment.NetworkWallet `json:"wallets"`
}

// UpdateInput is the update-widget body; absent fields stay as they are.
// accepts and wallets are checked together, as they will stand.
type UpdateInput struct {
	Name    *string                 `json:"name,omitempty"`
	Status  *entwidget.Status       `json:"status,omitempty"`
	Accepts []payment.Accept        `json:"accepts,omitempty"`
	Wallets []payment.NetworkWallet `json:"wallets,omitempty"`
}

// checkName is the business name rule at the widget's bound.
func checkName(v *apperr.Validator, name string) { v.Text("name", name, MaxNameLength) }

func checkStatus(v *apperr.Validator, st *entwidget.Status) {
	if st != nil && entwidget.StatusValidator(*st) != nil {
		v.Add("status", "must be ACTIVE or INACTIVE")
	}
}

// checkTerms validates accepts and wallets together: 1 to 20 distinct
// registry pairs, and exactly one wallet per accepted network, each
// address valid for its network's type (as redeem validates wallets; EVM
// addresses are stored in their checksum form). It returns them as stored.
func (s *Service) checkTerms(v *apperr.Validator, accepts []payment.Accept, wallets []payment.NetworkWallet) ([]payment.Accept, []payment.NetworkWallet) {
	nets := map[string]bool{}
	var outA []payment.Accept
	switch n := len(accepts); {
	case accepts == nil:
		v.Add("accepts", "is required")
	case n < 1 || n > MaxAccepts:
		v.Add("accepts", fmt.Sprintf("must have 1 to %d items", MaxAccepts))
	default:
		seen := map[payment.Accept]bool{}
		for i, a := range accepts {
			at := fmt.Sprintf("accepts[%d]", i)
			_, known := s.reg.Network(a.Network)
			switch {
			case a.Network == "":
				v.Add(at+".network", "is required")
				continue
			case !known:
				v.Add(at+".network", "unknown network")
				continue
			}
			tok, ok := s.reg.Token(a.Network, a.Currency)
			switch {
			case a.Currency == "":
				v.Add(at+".currency", "is required")
				continue
			case !ok:
				v.Add(at+".currency", "unknown currency on network "+a.Network)
				continue
			}
			p := payment.Accept{Network: tok.Network, Currency: tok.Currency}
			if seen[p] {
				v.Add(at, "duplicate pair")
				continue
			}
			seen[p] = true
			nets[p.Network] = true
			outA = append(outA, p)
		}
	}
	var outW []payment.NetworkWallet
	if wallets == nil {
		v.Add("wallets", "is required")
		return outA, nil
	}
	have := map[string]bool{}
	for i, w := range wallets {
		at := fmt.Sprintf("wallets[%d]", i)
		n, known := s.reg.Network(w.Network)
		switch {
		case w.Network == "":
			v.Add(at+".network", "is required")
			continue
		case !known:
			v.Add(at+".network", "unknown network")
			continue
		case have[w.Network]:
			v.Add(at+".network", "duplicate network: one wallet per network")
			continue
		case len(nets) > 0 && !nets[w.Network]:
			v.Add(at+".network", "the widget accepts no token on this network")
			continue
		}
		have[w.Network] = true
		if w.Address == "" {
			v.Add(at+".address", "is required")
			continue
		}
		if err := chain.ValidateAddress(n.Type, w.Address); err != nil {
			v.Add(at+".address", err.Error())
			continue
		}
		addr := w.Address
		if n.Type == chain.TypeEVM {
			addr = chain.ChecksumAddress(addr)
		}
		outW = append(outW, payment.NetworkWallet{Network: n.Name, Address: addr})
	}
	for _, a := range outA {
		if !have[a.Network] {
			v.Add("wallets", "needs a wallet for network "+a.Network)
			have[a.Network] = true // once per network
		}
	}
	return outA, outW
}

// manager is business.Manager for op plus an ACTIVE business.
func (s *Service) manager(ctx context.Context, op *operation.Op, businessID string) (*ent.Business, error) {
	b, err := business.Manager(ctx, s.db.Client, op, businessID)
	if err != nil {
		return nil, err
	}
	if err := business.RequireActive(b); err != nil {
		return nil, err
	}
	return b, nil
}

var errNotFound = apperr.New(apperr.NotFound, "widget not found")

// Create adds a widget to the business (OWNER or ADMIN) and returns it
// with its client secret, the only time the secret is shown.
func (s *Service) Create(ctx context.Context, businessID string, in CreateInput) (*WithSecret, error) {
	b, err := s.manager(ctx, operation.CreateWidget, businessID)
	if err != nil {
		return nil, err
	}
	var v apperr.Validator
	if v.Check(in.Name != nil, "name", "is required") {
		checkName(&v, *in.Name)
	}
	checkStatus(&v, in.Status)
	accepts, wallets := s.checkTerms(&v, in.Accepts, in.Wallets)
	if err := v.Err(); err != nil {
		return nil, err
	}
	secret, hash, err := newSecret()
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	status := entwidget.StatusACTIVE
	if in.Status != nil {
		status = *in.Status
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	var created *ent.Widget
	err = s.db.Tx(ctx, func(tx *ent.Tx) error {
		n, err := tx.Widget.Query().Where(entwidget.BusinessID(b.ID)).Count(ctx)
		if err != nil {
			return err
		}
		if n >= MaxWidgetsPerBusiness {
			return apperr.Newf(apperr.LimitExceeded, "a business may have at most %d widgets", MaxWidgetsPerBusiness)
		}
		id := ids.New(ids.Widget)
		sess, err := checkoutContext(ctx, tx, id, now)
		if err != nil {
			return err
		}
		created, err = tx.Widget.Create().SetID(id).
			SetBusinessID(b.ID).SetName(*in.Name).SetStatus(status).
			SetAccepts(accepts).SetWallets(wallets).
			SetSecretHash(hash).SetSessionID(sess.ID).
			SetCreatedAt(now).SetUpdatedAt(now).
			Save(ctx)
		return err
	})
	if err != nil {
		return nil, apperr.From(err)
	}
	return &WithSecret{Widget: created, ClientSecret: secret}, nil
}

// checkoutContext creates a widget's checkout context: a voucher session
// that is never live (no live code, CLOSED from the start), so no payer can
// reserve on it and the sweeper never touches it. Its owner is the widget. Checkout vouchers belong
// to it, which keeps every voucher in a context.
func checkoutContext(ctx context.Context, tx *ent.Tx, widgetID string, now time.Time) (*ent.VoucherSession, error) {
	code, err := session.NewCode()
	if err != nil {
		return nil, err
	}
	return tx.VoucherSession.Create().
		SetCode(code).SetOwnerID(widgetID).
		SetStatus(vouchersession.StatusCLOSED).SetClosedAt(now).
		SetExpiresAt(now).SetCreatedAt(now).SetUpdatedAt(now).
		Save(ctx)
}

// List returns the business's widgets, oldest first (members).
func (s *Service) List(ctx context.Context, businessID string) ([]*ent.Widget, error) {
	b, _, err := business.Member(ctx, s.db.Client, operation.ListWidgets, businessID)
	if err != nil {
		return nil, err
	}
	ws, err := s.db.Widget.Query().Where(entwidget.BusinessID(b.ID)).
		Order(ent.Asc(entwidget.FieldCreatedAt), ent.Asc(entwidget.FieldID)).All(ctx)
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return ws, nil
}

// Get returns one widget of the business (members).
func (s *Service) Get(ctx context.Context, businessID, id string) (*ent.Widget, error) {
	b, _, err := business.Member(ctx, s.db.Client, operation.GetWidget, businessID)
	if err != nil {
		return nil, err
	}
	return s.load(ctx, s.db.Client, b.ID, id)
}

// Node loads a widget for node(id:): visible to the ACTIVE members of its
// business; nil (no error) to anyone else.
func (s *Service) Node(ctx context.Context, id string) (*ent.Widget, error) {
	p, err := operation.Caller(ctx, operation.GetWidget)
	if err != nil || p.IsAPIKey() {
		// A key is no member: node(id:) shows members their widgets.
		return nil, nil
	}
	w, err := s.memberWidget(ctx, p, id)
	if err == errNotFound {
		return nil, nil
	}
	return w, err
}

// memberWidget loads widget id for p, a user who is an ACTIVE member of
// its business or an API key of that business (its scope was checked with
// the operation's); errNotFound when there is no such widget or p may not
// see it (the public routes with a bearer token, node(id:)).
func (s *Service) memberWidget(ctx context.Context, p *auth.Principal, id string) (*ent.Widget, error) {
	w, err := s.db.Widget.Get(ctx, id)
	if ent.IsNotFound(err) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	if p.IsAPIKey() {
		if w.BusinessID != p.BusinessID {
			return nil, errNotFound
		}
		return w, nil
	}
	ok, err := s.db.BusinessUser.Query().Where(businessuser.BusinessID(w.BusinessID), businessuser.UserID(p.ID),
		businessuser.StatusEQ(businessuser.StatusACTIVE)).Exist(ctx)
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	if !ok {
		return nil, errNotFound
	}
	return w, nil
}

func (s *Service) load(ctx context.Context, c *ent.Client, businessID, id string) (*ent.Widget, error) {
	w, err := c.Widget.Query().Where(entwidget.ID(id), entwidget.BusinessID(businessID)).Only(ctx)
	if ent.IsNotFound(err) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return w, nil
}

// Update changes a widget (OWNER or ADMIN, ACTIVE business).
func (s *Service) Update(ctx context.Context, businessID, id string, in UpdateInput) (*ent.Widget, error) {
	b, err := s.manager(ctx, operation.UpdateWidget, businessID)
	if err != nil {
		return nil, err
	}
	cur, err := s.load(ctx, s.db.Client, b.ID, id)
	if err != nil {
		return nil, err
	}
	var v apperr.Validator
	if in.Name != nil {
		checkName(&v, *in.Name)
	}
	checkStatus(&v, in.Status)
	var accepts []payment.Accept
	var wallets []payment.NetworkWallet
	if in.Accepts != nil || in.Wallets != nil {
		a, w := in.Accepts, in.Wallets
		if a == nil {
			a = cur.Accepts
		}
		if w == nil {
			w = cur.Wallets
		}
		accepts, wallets = s.checkTerms(&v, a, w)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	u := s.db.Widget.UpdateOneID(cur.ID).Where(entwidget.BusinessID(b.ID)).
		SetUpdatedAt(s.now().UTC().Truncate(time.Millisecond))
	if in.Name != nil {
		u.SetName(*in.Name)
	}
	if in.Status != nil {
		u.SetStatus(*in.Status)
	}
	if accepts != nil {
		u.SetAccepts(accepts).SetWallets(wallets)
	}
	w, err := u.Save(ctx)
	if ent.IsNotFound(err) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return w, nil
}

// RotateSecret gives the widget a new client secret (OWNER or ADMIN): the
// old one stops working with this commit.
func (s *Service) RotateSecret(ctx context.Context, businessID, id string) (*WithSecret, error) {
	b, err := s.manager(ctx, operation.RotateWidgetSecret, businessID)
	if err != nil {
		return nil, err
	}
	secret, hash, err := newSecret()
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	w, err := s.db.Widget.UpdateOneID(id).Where(entwidget.BusinessID(b.ID)).
		SetSecretHash(hash).SetUpdatedAt(s.now().UTC().Truncate(time.Millisecond)).Save(ctx)
	if ent.IsNotFound(err) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, apperr.InternalError(err)
	}
	return &WithSecret{Widget: w, ClientSecret: secret}, nil
}

// Delete removes a widget (OWNER or ADMIN): its secret stops working at
// once. Checkouts it made stay: they are the business's vouchers, and
// their customers may be paying.
func (s *Service) Delete(ctx context.Context, businessID, id string) (string, error) {
	b, err := s.manager(ctx, operation.DeleteWidget, businessID)
	if err != nil {
		return "", err
	}
	n, err := s.db.Widget.Delete().Where(entwidget.ID(id), entwidget.BusinessID(b.ID)).Exec(ctx)
	if err != nil {
		return "", apperr.InternalError(err)
	}
	if n == 0 {
		return "", errNotFound
	}
	return id, nil
}

// authorizeWithBusiness is authorize, and the widget's business (for its
// name and status): what the public routes start with.
func (s *Service) authorizeWithBusiness(ctx context.Context, id, clientSecret string) (*ent.Widget, *ent.Business, error) {
	w, err := s.authorize(ctx, id, clientSecret)
	if err != nil {
		return nil, nil, err
	}
	b, err := s.db.Business.Query().Where(entbusiness.ID(w.BusinessID)).Only(ctx)
	if err != nil {
		return nil, nil, apperr.InternalError(err)
	}
	return w, b, nil
}
