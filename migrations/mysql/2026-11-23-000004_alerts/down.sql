ALTER TABLE executor_group DROP COLUMN agents_state;
ALTER TABLE job DROP COLUMN alert_on_no_agent;
DROP TABLE alert_event;
DROP TABLE alert_channel;
