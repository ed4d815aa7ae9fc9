// Package scene is the test scene shared by the controller, deployment-API
// and end-to-end tests and by the playground: builders for the objects a
// deployment involves (a MysqlFailoverGroup, a MysqlDatabase with its
// deployment clients, a ServiceAccount token from a real TokenRequest) and
// one deployment-API client.
//
// The client holds the server to the contract: every answer but 204 must be
// application/json with a JSON object body, or Send fails with ErrNotJSON.
// It talks to a handler in-process (ForHandler) or to a listener over the
// network (ForURL); both send the same requests.
//
// Not provided: the builders create nothing by themselves except Token
// (which must, to mint a token); callers create what they build, so each
// test decides its own namespaces and timing.
package scene
