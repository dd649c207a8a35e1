// Package ent is the generated ent client; the data model is in ./schema.
package ent

//go:generate go run -mod=mod entc.go
