-- define_schedule: a runner's q:schedule. The same schedule (spec and tz) keeps the time
-- the others count on, or, if that time passed while no runner ran it, adds it once now
-- (catch_up 'once') or skips it. The row lock makes concurrent definitions take turns.
CREATE OR REPLACE FUNCTION @S.define_schedule(p_queue text, p_name text, p_spec text,
    p_key text, p_payload jsonb, p_tz text, p_catch_up text, p_next double precision)
RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE o @S.schedules%ROWTYPE; v_next timestamptz; v_last timestamptz;
  v_out text := 'defined';
BEGIN
  PERFORM @S.check_queue('wqrun.define_schedule', p_queue);
  v_next := CASE WHEN p_next > 0 THEN to_timestamp(p_next) END;
  SELECT * INTO o FROM @S.schedules s WHERE s.queue = p_queue AND s.name = p_name FOR UPDATE;
  IF FOUND THEN v_last := o.last_at; END IF;
  IF FOUND AND o.spec = p_spec AND o.tz = p_tz AND o.next_at IS NOT NULL THEN
    IF o.next_at > now() THEN
      v_next := o.next_at; v_out := 'kept';
    ELSIF p_catch_up = 'once' THEN
      v_out := 'caught up: ' || @S.add(p_queue, coalesce(p_key, p_name), p_payload);
      v_last := o.next_at;
    ELSE
      v_out := 'skipped a missed time';
    END IF;
  END IF;
  INSERT INTO @S.schedules AS s (queue, name, spec, key, payload, tz, catch_up, next_at, last_at)
    VALUES (p_queue, p_name, p_spec, p_key, p_payload, p_tz, p_catch_up, v_next, v_last)
    ON CONFLICT (queue, name) DO UPDATE SET spec = EXCLUDED.spec, key = EXCLUDED.key,
      payload = EXCLUDED.payload, tz = EXCLUDED.tz, catch_up = EXCLUDED.catch_up,
      next_at = EXCLUDED.next_at, last_at = EXCLUDED.last_at;
  RETURN v_out;
END $fn$;
-- fire: a runner's timer for time p_at came. Whoever comes first once the row's next time
-- is due moves it on (compare-and-set) and adds; the others find it moved.
CREATE OR REPLACE FUNCTION @S.fire(p_queue text, p_name text, p_at double precision,
    p_next double precision) RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE s record;
BEGIN
  UPDATE @S.schedules x SET last_at = x.next_at,
      next_at = CASE WHEN p_next > 0 THEN to_timestamp(p_next) END
    WHERE x.queue = p_queue AND x.name = p_name
      AND x.next_at <= greatest(now(), to_timestamp(p_at))
    RETURNING x.key, x.payload INTO s;
  IF NOT FOUND THEN RETURN 'taken'; END IF;
  RETURN @S.add(p_queue, coalesce(s.key, p_name), s.payload);
END $fn$;
CREATE OR REPLACE FUNCTION @S.purge_dead(p_queue text) RETURNS integer LANGUAGE sql AS $fn$
  WITH d AS (DELETE FROM @S.dead x WHERE x.queue = p_queue RETURNING 1)
  SELECT count(*)::integer FROM d $fn$;
