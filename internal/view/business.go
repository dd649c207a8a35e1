package view

import (
	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/internal/apitime"
)

// Business is a business as create-business and the list return it.
type Business struct {
	ID        string       `json:"id"`
	Name      string       `json:"name"`
	Status    string       `json:"status"`
	CreatedAt apitime.Time `json:"createdAt"`
}

// BusinessDetail is a business as get returns it (with updatedAt).
type BusinessDetail struct {
	Business
	UpdatedAt apitime.Time `json:"updatedAt"`
}

// BusinessUser is a membership as the users list returns it.
type BusinessUser struct {
	ID        string       `json:"id"`
	UserID    string       `json:"userId"`
	Role      string       `json:"role"`
	Status    string       `json:"status"`
	CreatedAt apitime.Time `json:"createdAt"`
}

// OfBusiness renders b for REST.
func OfBusiness(b *ent.Business) Business {
	return Business{ID: b.ID, Name: b.Name, Status: string(b.Status), CreatedAt: apitime.From(b.CreatedAt)}
}

// OfBusinessDetail renders b with its updatedAt.
func OfBusinessDetail(b *ent.Business) BusinessDetail {
	return BusinessDetail{Business: OfBusiness(b), UpdatedAt: apitime.From(b.UpdatedAt)}
}

// OfBusinessUser renders a membership for REST.
func OfBusinessUser(m *ent.BusinessUser) BusinessUser {
	return BusinessUser{ID: m.ID, UserID: m.UserID, Role: string(m.Role), Status: string(m.Status), CreatedAt: apitime.From(m.CreatedAt)}
}
