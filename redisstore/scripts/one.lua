-- one.lua: take.lua for the commonest call, one request on the server's
-- clock: its keys and its one argument (see args.lua), without the clock
-- argument and the count (every argument costs the server time).
return (check(clock_of(''), 1, 1, 1))
