package testkit

// ContractMetrics lists the series names of the exporter's public contract
// (the metric tables in the README), Prometheus's up, and the threshold the
// alert rules record: the only names the rules and dashboards may use.
// TestContractMetricsAreExported checks the exporter really serves them.
func ContractMetrics() []string {
	return []string{
		"breach:stale_refresh_rounds:threshold",
		"breach_account_info",
		"breach_address_last_refresh_timestamp_seconds",
		"breach_address_state",
		"breach_alert_exposed_fields_total",
		"breach_alert_last_observed_timestamp_seconds",
		"breach_alert_new_databases_total",
		"breach_alert_new_plaintext_passwords_total",
		"breach_alerts_total",
		"breach_api_budget_requests_per_minute",
		"breach_api_rate_limit_limit",
		"breach_api_rate_limit_remaining",
		"breach_api_rate_limit_reset_timestamp_seconds",
		"breach_api_request_duration_seconds_bucket",
		"breach_api_request_failures_total",
		"breach_api_requests_total",
		"breach_api_up",
		"breach_exporter_build_info",
		"breach_exporter_config_last_reload_success_timestamp_seconds",
		"breach_exporter_config_last_reload_successful",
		"breach_exporter_state_load_failures_total",
		"breach_exporter_state_snapshot_last_successful",
		"breach_refresh_cycle_seconds",
		"breach_source_breaches",
		"breach_source_database_info",
		"breach_source_databases",
		"breach_source_field_exposed",
		"breach_source_last_changed_timestamp_seconds",
		"breach_source_last_scanned_timestamp_seconds",
		"breach_source_plaintext_password",
		"breach_webhook_alerts_future_observed_total",
		"breach_webhook_alerts_untracked_total",
		"breach_webhook_request_duration_seconds_bucket",
		"breach_webhook_request_duration_seconds_count",
		"breach_webhook_requests_total",
		"up",
	}
}

// IsContractMetric reports whether name is in ContractMetrics.
func IsContractMetric(name string) bool {
	for _, n := range ContractMetrics() {
		if n == name {
			return true
		}
	}
	return false
}
