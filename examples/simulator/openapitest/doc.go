// Package openapitest checks the simulator against its own OpenAPI
// document (sim.OpenAPIDocument) with kin-openapi's validator: the document
// is valid OpenAPI 3.1, and the simulator's responses and webhook alerts
// conform to it.
//
// It is its own Go module so that kin-openapi, which only this test uses,
// stays out of the exporter's go.mod; its go.mod replaces the exporter's
// module with the repository root. `make test` runs it (the unit target).
package openapitest
