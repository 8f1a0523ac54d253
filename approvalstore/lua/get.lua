-- get: read a record with the time to judge it by.
-- KEYS[1] the record. Replies {now, record()}; the status is
-- missing when the record is unknown.
return {int(now_us()), record()}
