package api

import _ "embed" // the OpenAPI document

// OpenAPI is the HTTP API described as OpenAPI 3.1 (openapi.yaml), served at
// GET /v1/openapi.yaml. The controller's tests check every route and reply against it.
//
//go:embed openapi.yaml
var OpenAPI []byte
