-- http jobs (issue 17): the request an http job sends, as JSON (method, url, headers, body,
-- statuses); NULL for the other handler types.
ALTER TABLE job ADD COLUMN http_request TEXT;
