ALTER TABLE job DROP COLUMN http_request;
