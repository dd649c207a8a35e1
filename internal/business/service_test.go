package business_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent"
	entbusiness "github.com/voucherd/voucherd/ent/business"
	"github.com/voucherd/voucherd/ent/businessuser"
	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/auth"
	"github.com/voucherd/voucherd/internal/business"
	"github.com/voucherd/voucherd/internal/storage"
	"github.com/voucherd/voucherd/testsupport/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// TestService runs every scenario on one fresh database of each kind; the
// scenarios build their own users and businesses, so they run in parallel.
func TestService(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *storage.DB) {
		for _, sc := range []struct {
			name string
			run  func(*testing.T, *storage.DB)
		}{
			{"RoleMatrix", testRoleMatrix},
			{"Validation", testValidation},
			{"ErrorOrder", testErrorOrder},
			{"Owners", testOwners},
			{"OwnersDeactivatingEachOther", testOwnersDeactivatingEachOther},
			{"InactiveBusiness", testInactiveBusiness},
			{"AddUser", testAddUser},
			{"AddUserConcurrently", testAddUserConcurrently},
			{"ListOwnOrder", testListOwnOrder},
		} {
			t.Run(sc.name, func(t *testing.T) {
				t.Parallel()
				sc.run(t, db)
			})
		}
	})
}

func as(kind auth.Kind, id string) context.Context {
	return auth.WithPrincipal(context.Background(), &auth.Principal{Kind: kind, ID: id})
}

func ptr[T any](v T) *T { return &v }

// fixture is one business with a member of every kind, and a registered
// user who is not yet a member.
type fixture struct {
	db  *storage.DB
	svc *business.Service
	biz *ent.Business
	// users by actor name; memberships by actor name (where they have one).
	users   map[string]*ent.User
	members map[string]*ent.BusinessUser
}

func newUser(t *testing.T, db *storage.DB) *ent.User {
	t.Helper()
	u, err := db.User.Create().SetEmail(fmt.Sprintf("user%s@example.com", ids())).SetPasswordHash("x").Save(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return u
}

var (
	idMu sync.Mutex
	idN  int
)

func ids() string {
	idMu.Lock()
	defer idMu.Unlock()
	idN++
	return fmt.Sprint(idN)
}

// ticker is a clock that moves a millisecond (the stored precision) per
// reading, so every write has a later updatedAt than the one before.
func ticker() func() time.Time {
	var mu sync.Mutex
	t := time.Now()
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t = t.Add(time.Millisecond)
		return t
	}
}

func setup(t *testing.T, db *storage.DB) *fixture {
	t.Helper()
	f := &fixture{db: db, svc: business.NewService(db, ticker()), users: map[string]*ent.User{}, members: map[string]*ent.BusinessUser{}}
	for _, name := range []string{"owner", "admin", "member", "inactive", "stranger", "newcomer"} {
		f.users[name] = newUser(t, db)
	}
	var err error
	f.biz, err = f.svc.Create(f.user("owner"), business.CreateInput{Name: ptr("Acme")})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := listUsers(f.user("owner"), f.svc, f.biz.ID)
	if err != nil || len(rows) != 1 {
		t.Fatalf("creator membership: %v %v", rows, err)
	}
	f.members["owner"] = rows[0]
	for name, role := range map[string]businessuser.Role{"admin": businessuser.RoleADMIN, "member": businessuser.RoleMEMBER, "inactive": businessuser.RoleMEMBER} {
		m, err := f.svc.AddUser(f.user("owner"), f.biz.ID, business.AddUserInput{Email: ptr(f.users[name].Email), Role: ptr(role)})
		if err != nil {
			t.Fatalf("add %s: %v", name, err)
		}
		f.members[name] = m
	}
	if _, err := f.svc.SetUserStatus(f.user("owner"), f.biz.ID, f.members["inactive"].ID, business.UserStatusInput{Status: ptr(businessuser.StatusINACTIVE)}); err != nil {
		t.Fatal(err)
	}
	return f
}

// user returns a context for the named user's email-password token.
func (f *fixture) user(name string) context.Context { return as(auth.KindUser, f.users[name].ID) }

// state is everything an operation on the fixture could change: the
// businesses its users belong to (the fixture's and any they created) and
// their memberships. Other scenarios share the database, so it looks no
// further.
type state struct {
	Businesses []string
	Members    []string
}

func (f *fixture) state(t *testing.T) state {
	t.Helper()
	ctx := context.Background()
	var userIDs []string
	for _, u := range f.users {
		userIDs = append(userIDs, u.ID)
	}
	var s state
	rows := f.db.Business.Query().
		Where(entbusiness.Or(entbusiness.ID(f.biz.ID), entbusiness.HasMembersWith(businessuser.UserIDIn(userIDs...)))).
		Order(entbusiness.ByID()).AllX(ctx)
	for _, b := range rows {
		s.Businesses = append(s.Businesses, fmt.Sprintf("%s|%s|%s|%s", b.ID, b.Name, b.Status, b.UpdatedAt))
		for _, m := range f.db.BusinessUser.Query().Where(businessuser.BusinessID(b.ID)).Order(businessuser.ByID()).AllX(ctx) {
			s.Members = append(s.Members, fmt.Sprintf("%s|%s|%s|%s|%s|%s", m.ID, m.BusinessID, m.UserID, m.Role, m.Status, m.UpdatedAt))
		}
	}
	return s
}

// actors are every kind of caller. Device and resource tokens are refused
// before anything is looked up, so their ids need not exist.
var actors = []string{"owner", "admin", "member", "inactive", "stranger", "device", "resource", "anonymous"}

func (f *fixture) ctx(actor string) context.Context {
	switch actor {
	case "device":
		return as(auth.KindDevice, "dev_01hzzzzzzzzzzzzzzzzzzzzzzz")
	case "resource":
		return as(auth.KindResource, "ses_01hzzzzzzzzzzzzzzzzzzzzzzz")
	case "anonymous":
		return context.Background()
	}
	return f.user(actor)
}

// testRoleMatrix runs every operation as every kind of caller: a failure
// has the documented code and changes nothing; a success has its effect.
func testRoleMatrix(t *testing.T, db *storage.DB) {
	const (
		ok  = apperr.Code("")
		nf  = apperr.NotFound
		fb  = apperr.Forbidden
		una = apperr.Unauthorized
	)
	type op struct {
		name string
		run  func(ctx context.Context, f *fixture) error
		// check verifies a success's effect.
		check func(t *testing.T, f *fixture, actor string)
		// want per actor, in the order of actors.
		want []apperr.Code
	}
	ops := []op{
		{
			name: "create",
			run: func(ctx context.Context, f *fixture) error {
				_, err := f.svc.Create(ctx, business.CreateInput{Name: ptr("Second")})
				return err
			},
			check: func(t *testing.T, f *fixture, actor string) {
				n := f.db.Business.Query().Where(entbusiness.Name("Second"), entbusiness.HasMembersWith(
					businessuser.UserID(f.users[actor].ID), businessuser.RoleEQ(businessuser.RoleOWNER))).CountX(context.Background())
				if n != 1 {
					t.Errorf("businesses the creator owns after create: %d", n)
				}
			},
			want: []apperr.Code{ok, ok, ok, ok, ok, fb, fb, una},
		},
		{
			// listOwn succeeds for every user; it reports not_found here when
			// the fixture's business is not among the caller's.
			name: "list-own",
			run: func(ctx context.Context, f *fixture) error {
				rows, err := listOwn(ctx, f.svc)
				if err != nil {
					return err
				}
				for _, b := range rows {
					if b.ID == f.biz.ID {
						return nil
					}
				}
				return apperr.New(apperr.NotFound, "not listed")
			},
			want: []apperr.Code{ok, ok, ok, nf, nf, fb, fb, una},
		},
		{
			name: "get",
			run: func(ctx context.Context, f *fixture) error {
				b, err := f.svc.Get(ctx, f.biz.ID)
				if err == nil && (b.ID != f.biz.ID || b.Name != "Acme") {
					return fmt.Errorf("got %+v", b)
				}
				return err
			},
			want: []apperr.Code{ok, ok, ok, nf, nf, fb, fb, una},
		},
		{
			name: "list-users",
			run: func(ctx context.Context, f *fixture) error {
				rows, err := listUsers(ctx, f.svc, f.biz.ID)
				if err == nil && len(rows) != 4 {
					return fmt.Errorf("listed %d members, want 4 (inactive ones included)", len(rows))
				}
				return err
			},
			want: []apperr.Code{ok, ok, ok, nf, nf, fb, fb, una},
		},
		{
			name: "update-business",
			run: func(ctx context.Context, f *fixture) error {
				_, err := f.svc.Update(ctx, f.biz.ID, business.UpdateInput{Name: ptr("Renamed")})
				return err
			},
			check: func(t *testing.T, f *fixture, _ string) {
				if b := f.db.Business.GetX(context.Background(), f.biz.ID); b.Name != "Renamed" || !b.UpdatedAt.After(f.biz.UpdatedAt) {
					t.Errorf("after update: %q updatedAt %v (was %v)", b.Name, b.UpdatedAt, f.biz.UpdatedAt)
				}
			},
			want: []apperr.Code{ok, ok, fb, nf, nf, fb, fb, una},
		},
		{
			name: "update-status",
			run: func(ctx context.Context, f *fixture) error {
				_, err := f.svc.SetStatus(ctx, f.biz.ID, business.StatusInput{Status: ptr(entbusiness.StatusINACTIVE)})
				return err
			},
			check: func(t *testing.T, f *fixture, _ string) {
				if b := f.db.Business.GetX(context.Background(), f.biz.ID); b.Status != entbusiness.StatusINACTIVE {
					t.Errorf("status after update-status: %s", b.Status)
				}
			},
			want: []apperr.Code{ok, fb, fb, nf, nf, fb, fb, una},
		},
		{
			name: "add-user",
			run: func(ctx context.Context, f *fixture) error {
				_, err := f.svc.AddUser(ctx, f.biz.ID, business.AddUserInput{Email: ptr(f.users["newcomer"].Email), Role: ptr(businessuser.RoleMEMBER)})
				return err
			},
			check: func(t *testing.T, f *fixture, _ string) {
				m, err := f.db.BusinessUser.Query().Where(businessuser.BusinessID(f.biz.ID), businessuser.UserID(f.users["newcomer"].ID)).Only(context.Background())
				if err != nil || m.Role != businessuser.RoleMEMBER || m.Status != businessuser.StatusACTIVE {
					t.Errorf("newcomer membership %+v %v", m, err)
				}
			},
			want: []apperr.Code{ok, ok, fb, nf, nf, fb, fb, una},
		},
		{
			name: "set-member-status",
			run: func(ctx context.Context, f *fixture) error {
				_, err := f.svc.SetUserStatus(ctx, f.biz.ID, f.members["member"].ID, business.UserStatusInput{Status: ptr(businessuser.StatusINACTIVE)})
				return err
			},
			check: func(t *testing.T, f *fixture, _ string) {
				if m := f.db.BusinessUser.GetX(context.Background(), f.members["member"].ID); m.Status != businessuser.StatusINACTIVE {
					t.Errorf("member status after update-status: %s", m.Status)
				}
			},
			want: []apperr.Code{ok, ok, fb, nf, nf, fb, fb, una},
		},
	}
	for _, o := range ops {
		for i, actor := range actors {
			t.Run(o.name+"/"+actor, func(t *testing.T) {
				t.Parallel()
				f := setup(t, db)
				before := f.state(t)
				err := o.run(f.ctx(actor), f)
				want := o.want[i]
				if want == ok {
					if err != nil {
						t.Fatalf("want success, got %v", err)
					}
					if o.check != nil {
						o.check(t, f, actor)
					}
					return
				}
				if got := apperr.CodeOf(err); got != want {
					t.Fatalf("want %s, got %v", want, err)
				}
				if after := f.state(t); !reflect.DeepEqual(before, after) {
					t.Fatalf("a refused %s changed stored state:\nbefore %v\nafter  %v", o.name, before, after)
				}
			})
		}
	}
}

func testValidation(t *testing.T, db *storage.DB) {
	f := setup(t, db)
	owner := f.user("owner")
	bad := func(t *testing.T, err error, field string) {
		t.Helper()
		var ae *apperr.Error
		if !errors.As(err, &ae) || ae.Code != apperr.ValidationFailed {
			t.Fatalf("want validation_failed, got %v", err)
		}
		if len(ae.Details) != 1 || ae.Details[0].Field != field {
			t.Fatalf("details %+v, want one for %s", ae.Details, field)
		}
	}
	before := f.state(t)
	names := map[string]*string{
		"missing":        nil,
		"empty":          ptr(""),
		"129 characters": ptr(strings.Repeat("a", 129)),
		"blank":          ptr("   "),
		"control":        ptr("a\x00b"),
		"invalid utf-8":  ptr("a\xffb"),
	}
	for label, name := range names {
		t.Run("create name "+label, func(t *testing.T) {
			_, err := f.svc.Create(owner, business.CreateInput{Name: name})
			bad(t, err, "name")
		})
		if name != nil {
			t.Run("update name "+label, func(t *testing.T) {
				_, err := f.svc.Update(owner, f.biz.ID, business.UpdateInput{Name: name})
				bad(t, err, "name")
			})
		}
	}
	t.Run("business status", func(t *testing.T) {
		_, err := f.svc.SetStatus(owner, f.biz.ID, business.StatusInput{Status: ptr(entbusiness.Status("DELETED"))})
		bad(t, err, "status")
		_, err = f.svc.SetStatus(owner, f.biz.ID, business.StatusInput{})
		bad(t, err, "status")
	})
	t.Run("member status", func(t *testing.T) {
		_, err := f.svc.SetUserStatus(owner, f.biz.ID, f.members["member"].ID, business.UserStatusInput{Status: ptr(businessuser.Status("active"))})
		bad(t, err, "status")
		_, err = f.svc.SetUserStatus(owner, f.biz.ID, f.members["member"].ID, business.UserStatusInput{})
		bad(t, err, "status")
	})
	t.Run("add-user", func(t *testing.T) {
		_, err := f.svc.AddUser(owner, f.biz.ID, business.AddUserInput{Email: ptr(f.users["newcomer"].Email), Role: ptr(businessuser.Role("VIEWER"))})
		bad(t, err, "role")
		_, err = f.svc.AddUser(owner, f.biz.ID, business.AddUserInput{Role: ptr(businessuser.RoleMEMBER)})
		bad(t, err, "email")
		_, err = f.svc.AddUser(owner, f.biz.ID, business.AddUserInput{Email: ptr(f.users["newcomer"].Email)})
		bad(t, err, "role")
	})
	if after := f.state(t); !reflect.DeepEqual(before, after) {
		t.Fatalf("refused requests changed stored state:\nbefore %v\nafter  %v", before, after)
	}

	// 128 characters of four bytes each is a valid name; so is an update
	// without a name (nothing changes).
	long := strings.Repeat("😀", 128)
	b, err := f.svc.Create(owner, business.CreateInput{Name: &long})
	if err != nil || b.Name != long || b.Status != entbusiness.StatusACTIVE {
		t.Fatalf("128-rune name: %v %v", b, err)
	}
	same, err := f.svc.Update(owner, b.ID, business.UpdateInput{})
	if err != nil || same.Name != long || !same.UpdatedAt.Equal(b.UpdatedAt) {
		t.Fatalf("empty update: %+v %v", same, err)
	}
}

// testErrorOrder: visibility, then role, then the body, then state.
func testErrorOrder(t *testing.T, db *storage.DB) {
	f := setup(t, db)
	badName := business.UpdateInput{Name: ptr("")}
	if _, err := f.svc.Update(f.user("stranger"), f.biz.ID, badName); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("stranger with a bad body: %v", err)
	}
	if _, err := f.svc.Update(f.user("member"), f.biz.ID, badName); apperr.CodeOf(err) != apperr.Forbidden {
		t.Fatalf("member with a bad body: %v", err)
	}
	if _, err := f.svc.SetUserStatus(f.user("member"), f.biz.ID, "bzu_missing", business.UserStatusInput{}); apperr.CodeOf(err) != apperr.Forbidden {
		t.Fatalf("member on an unknown membership: %v", err)
	}
	if _, err := f.svc.SetUserStatus(f.user("admin"), f.biz.ID, "bzu_missing", business.UserStatusInput{}); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("admin on an unknown membership: %v", err)
	}
	if _, err := f.svc.Get(f.user("owner"), "biz_doesnotexist"); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("unknown business: %v", err)
	}
	// A membership of another business is not found through this one.
	other, err := f.svc.Create(f.user("stranger"), business.CreateInput{Name: ptr("Other")})
	if err != nil {
		t.Fatal(err)
	}
	otherRows, _ := listUsers(f.user("stranger"), f.svc, other.ID)
	if _, err := f.svc.SetUserStatus(f.user("owner"), f.biz.ID, otherRows[0].ID, business.UserStatusInput{Status: ptr(businessuser.StatusINACTIVE)}); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("foreign membership: %v", err)
	}
	if _, err := f.svc.GetUser(f.user("owner"), otherRows[0].ID); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("foreign membership get: %v", err)
	}
	if m, err := f.svc.GetUser(f.user("member"), f.members["admin"].ID); err != nil || m.Role != businessuser.RoleADMIN {
		t.Fatalf("member reads a membership: %v %v", m, err)
	}
	// An INACTIVE business: bad bodies are still validation_failed.
	if _, err := f.svc.SetStatus(f.user("owner"), f.biz.ID, business.StatusInput{Status: ptr(entbusiness.StatusINACTIVE)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Update(f.user("admin"), f.biz.ID, badName); apperr.CodeOf(err) != apperr.ValidationFailed {
		t.Fatalf("bad body on an inactive business: %v", err)
	}
}

func testOwners(t *testing.T, db *storage.DB) {
	f := setup(t, db)
	owner, admin := f.user("owner"), f.user("admin")
	inactive := business.UserStatusInput{Status: ptr(businessuser.StatusINACTIVE)}
	active := business.UserStatusInput{Status: ptr(businessuser.StatusACTIVE)}

	// The sole owner cannot leave; an admin cannot touch an owner at all.
	if _, err := f.svc.SetUserStatus(owner, f.biz.ID, f.members["owner"].ID, inactive); apperr.CodeOf(err) != apperr.LastOwner {
		t.Fatalf("last owner: %v", err)
	}
	if _, err := f.svc.SetUserStatus(admin, f.biz.ID, f.members["owner"].ID, inactive); apperr.CodeOf(err) != apperr.Forbidden {
		t.Fatalf("admin deactivating the owner: %v", err)
	}
	if _, err := f.svc.AddUser(admin, f.biz.ID, business.AddUserInput{Email: ptr(f.users["newcomer"].Email), Role: ptr(businessuser.RoleOWNER)}); apperr.CodeOf(err) != apperr.Forbidden {
		t.Fatalf("admin adding an owner: %v", err)
	}
	// An admin may add another admin, and deactivate themselves.
	if _, err := f.svc.AddUser(admin, f.biz.ID, business.AddUserInput{Email: ptr(f.users["newcomer"].Email), Role: ptr(businessuser.RoleADMIN)}); err != nil {
		t.Fatalf("admin adding an admin: %v", err)
	}
	if _, err := f.svc.SetUserStatus(admin, f.biz.ID, f.members["admin"].ID, inactive); err != nil {
		t.Fatalf("admin leaving: %v", err)
	}
	if _, err := f.svc.Get(admin, f.biz.ID); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("former admin reads: %v", err)
	}

	// With a second owner, either may go, but not both.
	second, err := f.svc.AddUser(owner, f.biz.ID, business.AddUserInput{Email: ptr(strings.ToUpper(" " + f.users["stranger"].Email + " ")), Role: ptr(businessuser.RoleOWNER)})
	if err != nil || second.UserID != f.users["stranger"].ID {
		t.Fatalf("owner adding an owner by a differently written email: %+v %v", second, err)
	}
	if _, err := f.svc.SetUserStatus(f.user("stranger"), f.biz.ID, f.members["owner"].ID, inactive); err != nil {
		t.Fatalf("second owner deactivating the first: %v", err)
	}
	if _, err := f.svc.SetUserStatus(f.user("stranger"), f.biz.ID, second.ID, inactive); apperr.CodeOf(err) != apperr.LastOwner {
		t.Fatalf("now last owner: %v", err)
	}
	// The first owner is out (404); the second brings them back.
	if _, err := f.svc.SetUserStatus(owner, f.biz.ID, second.ID, inactive); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("deactivated owner acting: %v", err)
	}
	if _, err := f.svc.SetUserStatus(f.user("stranger"), f.biz.ID, f.members["owner"].ID, active); err != nil {
		t.Fatalf("reactivating: %v", err)
	}
	if _, err := f.svc.Get(owner, f.biz.ID); err != nil {
		t.Fatalf("reactivated owner reads: %v", err)
	}
	// Setting the status it already has is a no-op, even for the last owner.
	if _, err := f.svc.SetUserStatus(owner, f.biz.ID, f.members["owner"].ID, active); err != nil {
		t.Fatal(err)
	}
}

// testOwnersDeactivatingEachOther: two owners deactivating each other at
// the same moment must not leave the business without an ACTIVE OWNER.
func testOwnersDeactivatingEachOther(t *testing.T, db *storage.DB) {
	for round := 0; round < 5; round++ {
		f := setup(t, db)
		second, err := f.svc.AddUser(f.user("owner"), f.biz.ID, business.AddUserInput{Email: ptr(f.users["newcomer"].Email), Role: ptr(businessuser.RoleOWNER)})
		if err != nil {
			t.Fatal(err)
		}
		inactive := business.UserStatusInput{Status: ptr(businessuser.StatusINACTIVE)}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := make(chan struct{})
		for i, c := range []struct {
			actor  string
			target string
		}{{"owner", second.ID}, {"newcomer", f.members["owner"].ID}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = f.svc.SetUserStatus(f.user(c.actor), f.biz.ID, c.target, inactive)
			}()
		}
		close(start)
		wg.Wait()
		var okN int
		for _, err := range errs {
			switch c := apperr.CodeOf(err); {
			case err == nil:
				okN++
			case c == apperr.LastOwner, c == apperr.NotFound:
				// The loser either counted one owner left or had already
				// been deactivated by the winner.
			default:
				t.Fatalf("unexpected error: %v", err)
			}
		}
		owners := db.BusinessUser.Query().Where(businessuser.BusinessID(f.biz.ID), businessuser.RoleEQ(businessuser.RoleOWNER), businessuser.StatusEQ(businessuser.StatusACTIVE)).CountX(context.Background())
		if okN != 1 || owners != 1 {
			t.Fatalf("round %d: %d succeeded, %d active owners left (errors %v)", round, okN, owners, errs)
		}
	}
}

func testInactiveBusiness(t *testing.T, db *storage.DB) {
	f := setup(t, db)
	owner, admin, member := f.user("owner"), f.user("admin"), f.user("member")
	if _, err := f.svc.SetStatus(owner, f.biz.ID, business.StatusInput{Status: ptr(entbusiness.StatusINACTIVE)}); err != nil {
		t.Fatal(err)
	}
	// Reads go on, for every ACTIVE member.
	for _, ctx := range []context.Context{owner, admin, member} {
		if b, err := f.svc.Get(ctx, f.biz.ID); err != nil || b.Status != entbusiness.StatusINACTIVE {
			t.Fatalf("get: %v %v", b, err)
		}
		if _, err := listUsers(ctx, f.svc, f.biz.ID); err != nil {
			t.Fatal(err)
		}
	}
	before := f.state(t)
	if _, err := f.svc.Update(admin, f.biz.ID, business.UpdateInput{Name: ptr("x")}); apperr.CodeOf(err) != apperr.BusinessInactive {
		t.Fatalf("update: %v", err)
	}
	if _, err := f.svc.AddUser(owner, f.biz.ID, business.AddUserInput{Email: ptr(f.users["newcomer"].Email), Role: ptr(businessuser.RoleMEMBER)}); apperr.CodeOf(err) != apperr.BusinessInactive {
		t.Fatalf("add-user: %v", err)
	}
	if _, err := f.svc.SetUserStatus(owner, f.biz.ID, f.members["member"].ID, business.UserStatusInput{Status: ptr(businessuser.StatusINACTIVE)}); apperr.CodeOf(err) != apperr.BusinessInactive {
		t.Fatalf("set member status: %v", err)
	}
	if err := business.RequireActive(f.db.Business.GetX(context.Background(), f.biz.ID)); apperr.CodeOf(err) != apperr.BusinessInactive {
		t.Fatalf("RequireActive: %v", err)
	}
	// Only an owner brings it back.
	if _, err := f.svc.SetStatus(admin, f.biz.ID, business.StatusInput{Status: ptr(entbusiness.StatusACTIVE)}); apperr.CodeOf(err) != apperr.Forbidden {
		t.Fatalf("admin reactivating: %v", err)
	}
	if after := f.state(t); !reflect.DeepEqual(before, after) {
		t.Fatalf("refused writes changed state:\nbefore %v\nafter  %v", before, after)
	}
	b, err := f.svc.SetStatus(owner, f.biz.ID, business.StatusInput{Status: ptr(entbusiness.StatusACTIVE)})
	if err != nil || b.Status != entbusiness.StatusACTIVE {
		t.Fatalf("reactivate: %v %v", b, err)
	}
	if _, err := f.svc.Update(admin, f.biz.ID, business.UpdateInput{Name: ptr("Back")}); err != nil {
		t.Fatalf("update after reactivation: %v", err)
	}
}

func testAddUser(t *testing.T, db *storage.DB) {
	f := setup(t, db)
	owner := f.user("owner")
	add := func(email string, role businessuser.Role) (*ent.BusinessUser, error) {
		return f.svc.AddUser(owner, f.biz.ID, business.AddUserInput{Email: &email, Role: &role})
	}
	if _, err := add("nobody@example.com", businessuser.RoleMEMBER); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("unknown email: %v", err)
	}
	if _, err := add(f.users["member"].Email, businessuser.RoleADMIN); apperr.CodeOf(err) != apperr.AlreadyExists {
		t.Fatalf("active member: %v", err)
	}
	if _, err := add(f.users["inactive"].Email, businessuser.RoleMEMBER); apperr.CodeOf(err) != apperr.AlreadyExists {
		t.Fatalf("inactive member: %v", err)
	}
	m, err := add(f.users["newcomer"].Email, businessuser.RoleMEMBER)
	if err != nil || m.Status != businessuser.StatusACTIVE || m.Role != businessuser.RoleMEMBER || m.UserID != f.users["newcomer"].ID || m.BusinessID != f.biz.ID {
		t.Fatalf("add: %+v %v", m, err)
	}
	// The newcomer sees the business at once.
	rows, err := listOwn(f.user("newcomer"), f.svc)
	if err != nil || len(rows) != 1 || rows[0].ID != f.biz.ID {
		t.Fatalf("newcomer's businesses: %v %v", rows, err)
	}
	// Reactivation is update-status.
	if _, err := f.svc.SetUserStatus(owner, f.biz.ID, f.members["inactive"].ID, business.UserStatusInput{Status: ptr(businessuser.StatusACTIVE)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Get(f.user("inactive"), f.biz.ID); err != nil {
		t.Fatalf("reactivated member reads: %v", err)
	}
}

// testAddUserConcurrently: of two managers adding the same user at once,
// exactly one succeeds and the other gets already_exists.
func testAddUserConcurrently(t *testing.T, db *storage.DB) {
	f := setup(t, db)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, actor := range []string{"owner", "admin"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = f.svc.AddUser(f.user(actor), f.biz.ID, business.AddUserInput{Email: ptr(f.users["newcomer"].Email), Role: ptr(businessuser.RoleMEMBER)})
		}()
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("want exactly one success: %v", errs)
	}
	for _, err := range errs {
		if err != nil && apperr.CodeOf(err) != apperr.AlreadyExists {
			t.Fatalf("loser: %v", err)
		}
	}
}

func testListOwnOrder(t *testing.T, db *storage.DB) {
	// Ids order only by millisecond; the ticker makes creation times distinct.
	svc := business.NewService(db, ticker())
	u := newUser(t, db)
	ctx := as(auth.KindUser, u.ID)
	var want []string
	for i := 0; i < 3; i++ {
		b, err := svc.Create(ctx, business.CreateInput{Name: ptr(fmt.Sprintf("B%d", i))})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, b.ID)
	}
	rows, err := listOwn(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range rows {
		got = append(got, b.ID)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

// listOwn and listUsers read the service's lists whole, in the order the
// REST door answers them.
func listOwn(ctx context.Context, svc *business.Service) ([]*ent.Business, error) {
	q, err := svc.List(ctx)
	if err != nil {
		return nil, err
	}
	return q.Order(business.OldestFirst...).All(ctx)
}

func listUsers(ctx context.Context, svc *business.Service, businessID string) ([]*ent.BusinessUser, error) {
	q, err := svc.ListUsers(ctx, businessID)
	if err != nil {
		return nil, err
	}
	return q.Order(business.MembersOldestFirst...).All(ctx)
}
