-- The consolidate service's schedule (issue 7): one row per job and schedule tick, so a
-- tick runs once however many replicas there are, and a replica that takes over after a
-- crash knows which tick is still owed.
CREATE TABLE job_runs (
    job          text        NOT NULL,
    tick         timestamptz NOT NULL,
    runner       text        NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    -- how many times the tick was started: more than 1 only after a crashed attempt
    attempts     integer     NOT NULL DEFAULT 1,
    finished_at  timestamptz,
    outcome      jsonb,
    PRIMARY KEY (job, tick)
);
