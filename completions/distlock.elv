
use builtin;
use str;

set edit:completion:arg-completer[distlock] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'distlock'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'distlock'= {
            cand -r 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --redis-url 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --prefix 'Key prefix; locks live at PREFIX:{NAME}'
            cand --redis-password-file 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)'
            cand --tls-ca 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s'
            cand --tls-cert 'Client certificate (PEM) for mutual TLS; needs --tls-key'
            cand --tls-key 'Client private key (PEM) for mutual TLS; needs --tls-cert'
            cand --min-replicas 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter'
            cand --tls-insecure 'Do not verify the server''s certificate (testing only; warns every time)'
            cand -v 'Say more on stderr (repeat for more)'
            cand --verbose 'Say more on stderr (repeat for more)'
            cand -q 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand --quiet 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
            cand run 'Run CMD while holding the lock NAME; renew the lease while it runs'
            cand acquire 'Take the lock NAME and print shell lines to eval (for scripts)'
            cand hold 'Take NAME and keep renewing it from a background process until `distlock release` (for locks that span several CI steps)'
            cand __hold-renewer 'Internal: the background renewer of `distlock hold`'
            cand renew 'Extend the lease on NAME if OWNER still holds it'
            cand release 'Release NAME if OWNER holds it (or whoever holds it, with --force)'
            cand inspect 'Show who holds NAME, for how long, and the last fencing token'
            cand list 'List every held lock under the prefix, sorted by name'
            cand doctor 'Check the Redis that the URL points at: is it safe for leases?'
            cand completions 'Print shell completions for SHELL on stdout'
            cand man 'Write man pages into DIR (used to regenerate man/)'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'distlock;run'= {
            cand --limit 'Semaphore: let up to N holders in at once, each with its own lease (1: a plain lock). Every user of a name must pass the same N'
            cand --ttl 'Lease length (`run` renews it while CMD runs; after `acquire`, renew it yourself)'
            cand -w 'How long to wait for a busy lock: a duration, 0 (do not wait) or forever'
            cand --wait 'How long to wait for a busy lock: a duration, 0 (do not wait) or forever'
            cand --wait-order 'Who gets a busy lock first: fair (arrival order) or any (no queue)'
            cand -E 'Exit code when the lock was not acquired'
            cand --conflict-exit-code 'Exit code when the lock was not acquired'
            cand --min-hold 'Keep the lock held until D after it was acquired, even if CMD ends or `release` comes sooner (the key keeps a TTL for the rest; no process lingers)'
            cand --renew-every 'Renewal period [default: ttl/3]'
            cand --kill-signal 'First signal sent to CMD''s process group when the lease is lost'
            cand --kill-grace 'Time between the kill signal and SIGKILL [default: min(5s, ttl/4)]'
            cand --max-hold 'Stop CMD (kill signal, then SIGKILL after the grace) once it has held the lock for D; exit 124'
            cand --at-risk-signal 'Send SIG to CMD once, as soon as a renewal is overdue (half a period late) or has failed, so it can checkpoint before the kill deadline [default: none]'
            cand --last-run-keep 'How long Redis keeps the record of the last run (who, when, how long, exit status, token)'
            cand -r 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --redis-url 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --prefix 'Key prefix; locks live at PREFIX:{NAME}'
            cand --redis-password-file 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)'
            cand --tls-ca 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s'
            cand --tls-cert 'Client certificate (PEM) for mutual TLS; needs --tls-key'
            cand --tls-key 'Client private key (PEM) for mutual TLS; needs --tls-cert'
            cand --min-replicas 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter'
            cand --tls-insecure 'Do not verify the server''s certificate (testing only; warns every time)'
            cand -v 'Say more on stderr (repeat for more)'
            cand --verbose 'Say more on stderr (repeat for more)'
            cand -q 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand --quiet 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'distlock;acquire'= {
            cand --limit 'Semaphore: let up to N holders in at once, each with its own lease (1: a plain lock). Every user of a name must pass the same N'
            cand --ttl 'Lease length (`run` renews it while CMD runs; after `acquire`, renew it yourself)'
            cand -w 'How long to wait for a busy lock: a duration, 0 (do not wait) or forever'
            cand --wait 'How long to wait for a busy lock: a duration, 0 (do not wait) or forever'
            cand --wait-order 'Who gets a busy lock first: fair (arrival order) or any (no queue)'
            cand -E 'Exit code when the lock was not acquired'
            cand --conflict-exit-code 'Exit code when the lock was not acquired'
            cand --min-hold 'Keep the lock held until D after it was acquired, even if CMD ends or `release` comes sooner (the key keeps a TTL for the rest; no process lingers)'
            cand --owner 'Owner id to hold the lease as [default: a new <host>:<pid>:<random hex>]'
            cand -r 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --redis-url 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --prefix 'Key prefix; locks live at PREFIX:{NAME}'
            cand --redis-password-file 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)'
            cand --tls-ca 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s'
            cand --tls-cert 'Client certificate (PEM) for mutual TLS; needs --tls-key'
            cand --tls-key 'Client private key (PEM) for mutual TLS; needs --tls-cert'
            cand --min-replicas 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter'
            cand --json 'Print one JSON object instead of export lines'
            cand --tls-insecure 'Do not verify the server''s certificate (testing only; warns every time)'
            cand -v 'Say more on stderr (repeat for more)'
            cand --verbose 'Say more on stderr (repeat for more)'
            cand -q 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand --quiet 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'distlock;hold'= {
            cand --limit 'Semaphore: let up to N holders in at once, each with its own lease (1: a plain lock). Every user of a name must pass the same N'
            cand --ttl 'Lease length (`run` renews it while CMD runs; after `acquire`, renew it yourself)'
            cand -w 'How long to wait for a busy lock: a duration, 0 (do not wait) or forever'
            cand --wait 'How long to wait for a busy lock: a duration, 0 (do not wait) or forever'
            cand --wait-order 'Who gets a busy lock first: fair (arrival order) or any (no queue)'
            cand -E 'Exit code when the lock was not acquired'
            cand --conflict-exit-code 'Exit code when the lock was not acquired'
            cand --min-hold 'Keep the lock held until D after it was acquired, even if CMD ends or `release` comes sooner (the key keeps a TTL for the rest; no process lingers)'
            cand --owner 'Owner id to hold the lease as [default: a new <host>:<pid>:<random hex>]'
            cand --max 'Release the lock after this long at the latest: a duration or forever'
            cand -r 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --redis-url 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --prefix 'Key prefix; locks live at PREFIX:{NAME}'
            cand --redis-password-file 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)'
            cand --tls-ca 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s'
            cand --tls-cert 'Client certificate (PEM) for mutual TLS; needs --tls-key'
            cand --tls-key 'Client private key (PEM) for mutual TLS; needs --tls-cert'
            cand --min-replicas 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter'
            cand --json 'Print one JSON object instead of export lines'
            cand --tls-insecure 'Do not verify the server''s certificate (testing only; warns every time)'
            cand -v 'Say more on stderr (repeat for more)'
            cand --verbose 'Say more on stderr (repeat for more)'
            cand -q 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand --quiet 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'distlock;__hold-renewer'= {
            cand --limit 'limit'
            cand --owner 'From the environment only: an owner id on the command line would show in `ps`, and anyone who knows it can release the lock'
            cand --ttl 'ttl'
            cand --t0-ns 'Boot-clock nanoseconds at which the acquisition was sent'
            cand --release-at-ns 'Boot-clock nanoseconds at which to release (none: never)'
            cand -r 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --redis-url 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --prefix 'Key prefix; locks live at PREFIX:{NAME}'
            cand --redis-password-file 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)'
            cand --tls-ca 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s'
            cand --tls-cert 'Client certificate (PEM) for mutual TLS; needs --tls-key'
            cand --tls-key 'Client private key (PEM) for mutual TLS; needs --tls-cert'
            cand --min-replicas 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter'
            cand --tls-insecure 'Do not verify the server''s certificate (testing only; warns every time)'
            cand -v 'Say more on stderr (repeat for more)'
            cand --verbose 'Say more on stderr (repeat for more)'
            cand -q 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand --quiet 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'distlock;renew'= {
            cand --limit 'Semaphore: let up to N holders in at once, each with its own lease (1: a plain lock). Every user of a name must pass the same N'
            cand --owner 'Owner id that must hold the lease'
            cand --ttl 'New lease length, counted from now'
            cand -r 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --redis-url 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --prefix 'Key prefix; locks live at PREFIX:{NAME}'
            cand --redis-password-file 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)'
            cand --tls-ca 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s'
            cand --tls-cert 'Client certificate (PEM) for mutual TLS; needs --tls-key'
            cand --tls-key 'Client private key (PEM) for mutual TLS; needs --tls-cert'
            cand --min-replicas 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter'
            cand --tls-insecure 'Do not verify the server''s certificate (testing only; warns every time)'
            cand -v 'Say more on stderr (repeat for more)'
            cand --verbose 'Say more on stderr (repeat for more)'
            cand -q 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand --quiet 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'distlock;release'= {
            cand --limit 'Semaphore: let up to N holders in at once, each with its own lease (1: a plain lock). Every user of a name must pass the same N'
            cand --owner 'Owner id that must hold the lease (ignored with --force)'
            cand -r 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --redis-url 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --prefix 'Key prefix; locks live at PREFIX:{NAME}'
            cand --redis-password-file 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)'
            cand --tls-ca 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s'
            cand --tls-cert 'Client certificate (PEM) for mutual TLS; needs --tls-key'
            cand --tls-key 'Client private key (PEM) for mutual TLS; needs --tls-cert'
            cand --min-replicas 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter'
            cand --force 'Release whoever holds it, and print who that was'
            cand --tls-insecure 'Do not verify the server''s certificate (testing only; warns every time)'
            cand -v 'Say more on stderr (repeat for more)'
            cand --verbose 'Say more on stderr (repeat for more)'
            cand -q 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand --quiet 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'distlock;inspect'= {
            cand --limit 'Semaphore: let up to N holders in at once, each with its own lease (1: a plain lock). Every user of a name must pass the same N'
            cand -r 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --redis-url 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --prefix 'Key prefix; locks live at PREFIX:{NAME}'
            cand --redis-password-file 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)'
            cand --tls-ca 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s'
            cand --tls-cert 'Client certificate (PEM) for mutual TLS; needs --tls-key'
            cand --tls-key 'Client private key (PEM) for mutual TLS; needs --tls-cert'
            cand --min-replicas 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter'
            cand --json 'Print one JSON object'
            cand --tls-insecure 'Do not verify the server''s certificate (testing only; warns every time)'
            cand -v 'Say more on stderr (repeat for more)'
            cand --verbose 'Say more on stderr (repeat for more)'
            cand -q 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand --quiet 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'distlock;list'= {
            cand -r 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --redis-url 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --prefix 'Key prefix; locks live at PREFIX:{NAME}'
            cand --redis-password-file 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)'
            cand --tls-ca 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s'
            cand --tls-cert 'Client certificate (PEM) for mutual TLS; needs --tls-key'
            cand --tls-key 'Client private key (PEM) for mutual TLS; needs --tls-cert'
            cand --min-replicas 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter'
            cand --json 'Print a JSON array of `inspect --json` objects'
            cand --tls-insecure 'Do not verify the server''s certificate (testing only; warns every time)'
            cand -v 'Say more on stderr (repeat for more)'
            cand --verbose 'Say more on stderr (repeat for more)'
            cand -q 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand --quiet 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'distlock;doctor'= {
            cand -r 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --redis-url 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --prefix 'Key prefix; locks live at PREFIX:{NAME}'
            cand --redis-password-file 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)'
            cand --tls-ca 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s'
            cand --tls-cert 'Client certificate (PEM) for mutual TLS; needs --tls-key'
            cand --tls-key 'Client private key (PEM) for mutual TLS; needs --tls-cert'
            cand --min-replicas 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter'
            cand --json 'Print a JSON array of {check, verdict, detail, advice}'
            cand --tls-insecure 'Do not verify the server''s certificate (testing only; warns every time)'
            cand -v 'Say more on stderr (repeat for more)'
            cand --verbose 'Say more on stderr (repeat for more)'
            cand -q 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand --quiet 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'distlock;completions'= {
            cand -r 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --redis-url 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --prefix 'Key prefix; locks live at PREFIX:{NAME}'
            cand --redis-password-file 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)'
            cand --tls-ca 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s'
            cand --tls-cert 'Client certificate (PEM) for mutual TLS; needs --tls-key'
            cand --tls-key 'Client private key (PEM) for mutual TLS; needs --tls-cert'
            cand --min-replicas 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter'
            cand --tls-insecure 'Do not verify the server''s certificate (testing only; warns every time)'
            cand -v 'Say more on stderr (repeat for more)'
            cand --verbose 'Say more on stderr (repeat for more)'
            cand -q 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand --quiet 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'distlock;man'= {
            cand --dir 'Directory to write distlock.1 and one page per subcommand into'
            cand -r 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --redis-url 'Redis to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port'
            cand --prefix 'Key prefix; locks live at PREFIX:{NAME}'
            cand --redis-password-file 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)'
            cand --tls-ca 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s'
            cand --tls-cert 'Client certificate (PEM) for mutual TLS; needs --tls-key'
            cand --tls-key 'Client private key (PEM) for mutual TLS; needs --tls-cert'
            cand --min-replicas 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter'
            cand --exit-table 'Print the README''s exit-code table (Markdown) on stdout instead, for scripts/gen-assets.sh and tests/assets.rs'
            cand --tls-insecure 'Do not verify the server''s certificate (testing only; warns every time)'
            cand -v 'Say more on stderr (repeat for more)'
            cand --verbose 'Say more on stderr (repeat for more)'
            cand -q 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand --quiet 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'distlock;help'= {
            cand run 'Run CMD while holding the lock NAME; renew the lease while it runs'
            cand acquire 'Take the lock NAME and print shell lines to eval (for scripts)'
            cand hold 'Take NAME and keep renewing it from a background process until `distlock release` (for locks that span several CI steps)'
            cand __hold-renewer 'Internal: the background renewer of `distlock hold`'
            cand renew 'Extend the lease on NAME if OWNER still holds it'
            cand release 'Release NAME if OWNER holds it (or whoever holds it, with --force)'
            cand inspect 'Show who holds NAME, for how long, and the last fencing token'
            cand list 'List every held lock under the prefix, sorted by name'
            cand doctor 'Check the Redis that the URL points at: is it safe for leases?'
            cand completions 'Print shell completions for SHELL on stdout'
            cand man 'Write man pages into DIR (used to regenerate man/)'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'distlock;help;run'= {
        }
        &'distlock;help;acquire'= {
        }
        &'distlock;help;hold'= {
        }
        &'distlock;help;__hold-renewer'= {
        }
        &'distlock;help;renew'= {
        }
        &'distlock;help;release'= {
        }
        &'distlock;help;inspect'= {
        }
        &'distlock;help;list'= {
        }
        &'distlock;help;doctor'= {
        }
        &'distlock;help;completions'= {
        }
        &'distlock;help;man'= {
        }
        &'distlock;help;help'= {
        }
    ]
    $completions[$command]
}
