module github.com/breach-exporter/breach_exporter/examples/simulator/openapitest

go 1.26.0

require (
	github.com/breach-exporter/breach_exporter v0.0.0-00010101000000-000000000000
	github.com/getkin/kin-openapi v0.152.0
	github.com/jonboulle/clockwork v0.5.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/go-kit/log v0.2.1 // indirect
	github.com/go-logfmt/logfmt v0.6.1 // indirect
	github.com/go-openapi/jsonpointer v0.22.5 // indirect
	github.com/go-openapi/swag/jsonname v0.25.5 // indirect
	github.com/oasdiff/yaml v0.1.1 // indirect
	github.com/oasdiff/yaml3 v0.0.14 // indirect
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/text v0.43.0 // indirect
)

replace github.com/breach-exporter/breach_exporter => ../../../
