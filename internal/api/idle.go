// SPDX-License-Identifier: Apache-2.0

package api

// CloseIdleConnections closes the keep-alive connections the client holds
// and is not using. The exporter calls it on a client a reload replaced:
// otherwise each replaced client keeps a connection and its goroutines
// until the transport's idle timeout.
func (c *Client) CloseIdleConnections() {
	c.httpClient.CloseIdleConnections()
}
