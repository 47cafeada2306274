-- Automatic degraded mode (issue 23): each service instance reports its error-budget
-- checks here; while any fresh row is breached and the `degraded` switch is "auto",
-- every service runs degraded. A row not refreshed by `expires_at` (its instance died)
-- no longer counts.
CREATE TABLE error_budget_checks (
    instance    text             NOT NULL,
    service     text             NOT NULL,
    check_name  text             NOT NULL,
    value       double precision,
    breached    boolean          NOT NULL,
    since       timestamptz      NOT NULL,
    expires_at  timestamptz      NOT NULL,
    PRIMARY KEY (instance, check_name)
);
CREATE INDEX error_budget_checks_breached ON error_budget_checks (expires_at) WHERE breached;

-- The shipped default becomes "auto"; a value an operator set stays a manual override.
UPDATE runtime_switches SET value = '"auto"'
 WHERE switch = 'degraded' AND value = 'false'::jsonb AND updated_by = 'system';
