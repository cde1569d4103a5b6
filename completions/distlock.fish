# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_distlock_global_optspecs
    string join \n r/url= prefix= redis-password-file= tls-ca= tls-cert= tls-key= tls-insecure min-replicas= v/verbose q/quiet h/help V/version
end

function __fish_distlock_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_distlock_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_distlock_using_subcommand
    set -l cmd (__fish_distlock_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c distlock -n "__fish_distlock_needs_command" -s r -l url -l redis-url -d 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]' -r
complete -c distlock -n "__fish_distlock_needs_command" -l prefix -d 'Key prefix; locks live at PREFIX:{NAME}' -r
complete -c distlock -n "__fish_distlock_needs_command" -l redis-password-file -d 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)' -r -F
complete -c distlock -n "__fish_distlock_needs_command" -l tls-ca -d 'Trust the CA(s) in this PEM file for rediss:// instead of the system\'s' -r -F
complete -c distlock -n "__fish_distlock_needs_command" -l tls-cert -d 'Client certificate (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c distlock -n "__fish_distlock_needs_command" -l tls-key -d 'Client private key (PEM) for mutual TLS; needs --tls-cert' -r -F
complete -c distlock -n "__fish_distlock_needs_command" -l min-replicas -d 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter' -r
complete -c distlock -n "__fish_distlock_needs_command" -l tls-insecure -d 'Do not verify the server\'s certificate (testing only; warns every time)'
complete -c distlock -n "__fish_distlock_needs_command" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c distlock -n "__fish_distlock_needs_command" -s q -l quiet -d 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
complete -c distlock -n "__fish_distlock_needs_command" -s h -l help -d 'Print help'
complete -c distlock -n "__fish_distlock_needs_command" -s V -l version -d 'Print version'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "run" -d 'Run CMD while holding the lock NAME; renew the lease while it runs'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "acquire" -d 'Take the lock NAME and print shell lines to eval (for scripts)'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "hold" -d 'Take NAME and keep renewing it from a background process until `distlock release` (for locks that span several CI steps)'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "__hold-renewer" -d 'Internal: the background renewer of `distlock hold`'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "renew" -d 'Extend the lease on NAME if OWNER still holds it'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "release" -d 'Release NAME if OWNER holds it (or whoever holds it, with --force)'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "inspect" -d 'Show who holds NAME, for how long, and the last fencing token'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "history" -d 'Show how the last runs of NAME ended, newest first'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "list" -d 'List every held lock under the prefix, sorted by name'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "doctor" -d 'Check the Redis or etcd that the URL points at: is it safe for leases?'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "completions" -d 'Print shell completions for SHELL on stdout'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "man" -d 'Write man pages into DIR (used to regenerate man/)'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c distlock -n "__fish_distlock_using_subcommand run" -l limit -d 'Semaphore: let up to N holders in at once, each with its own lease (1: a plain lock). Every user of a name must pass the same N' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l ttl -d 'Lease length (`run` renews it while CMD runs; after `acquire`, renew it yourself)' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -s w -l wait -d 'How long to wait for a busy lock: a duration, 0 (do not wait) or forever' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l wait-order -d 'Who gets a busy lock first: fair (arrival order) or any (no queue)' -r -f -a "fair\t'First come, first served: a queue under the lock\'s hash tag'
any\t'Whoever asks first once the lock is free (no queue)'"
complete -c distlock -n "__fish_distlock_using_subcommand run" -s E -l conflict-exit-code -d 'Exit code when the lock was not acquired' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l min-hold -d 'Keep the lock held until D after it was acquired, even if CMD ends or `release` comes sooner (the key keeps a TTL for the rest; no process lingers)' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l renew-every -d 'Renewal period [default: ttl/3]' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l kill-signal -d 'First signal sent to CMD\'s process group when the lease is lost' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l kill-grace -d 'Time between the kill signal and SIGKILL [default: min(5s, ttl/4)]' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l max-hold -d 'Stop CMD (kill signal, then SIGKILL after the grace) once it has held the lock for D; exit 124' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l at-risk-signal -d 'Send SIG to CMD once, as soon as a renewal is overdue (half a period late) or has failed, so it can checkpoint before the kill deadline [default: none]' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l once-per -d 'Once per window: after acquiring, start CMD only if no `run --once-per` of NAME succeeded (exited 0) less than D ago, by the server\'s clock (on etcd D is whole seconds); otherwise exit with --done-exit-code. A success writes the done mark PREFIX:{NAME}:done, which expires D after that run acquired the lock. Not with --limit above 1' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l done-exit-code -d 'Exit code when --once-per finds the job already done in this window' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l last-run-keep -d 'How long the store keeps the record of the last run (who, when, how long, exit status, token)' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l history-keep -d 'How many records of its runs the store keeps for NAME (`distlock history`); 0 keeps none' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l metrics-file -d 'When the run ends, write its metrics for node_exporter\'s textfile collector (Prometheus text format) to PATH, atomically; a file that cannot be written is a warning' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand run" -s r -l url -l redis-url -d 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l prefix -d 'Key prefix; locks live at PREFIX:{NAME}' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l redis-password-file -d 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand run" -l tls-ca -d 'Trust the CA(s) in this PEM file for rediss:// instead of the system\'s' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand run" -l tls-cert -d 'Client certificate (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand run" -l tls-key -d 'Client private key (PEM) for mutual TLS; needs --tls-cert' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand run" -l min-replicas -d 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l tls-insecure -d 'Do not verify the server\'s certificate (testing only; warns every time)'
complete -c distlock -n "__fish_distlock_using_subcommand run" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c distlock -n "__fish_distlock_using_subcommand run" -s q -l quiet -d 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
complete -c distlock -n "__fish_distlock_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand run" -s V -l version -d 'Print version'
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l limit -d 'Semaphore: let up to N holders in at once, each with its own lease (1: a plain lock). Every user of a name must pass the same N' -r
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l ttl -d 'Lease length (`run` renews it while CMD runs; after `acquire`, renew it yourself)' -r
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -s w -l wait -d 'How long to wait for a busy lock: a duration, 0 (do not wait) or forever' -r
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l wait-order -d 'Who gets a busy lock first: fair (arrival order) or any (no queue)' -r -f -a "fair\t'First come, first served: a queue under the lock\'s hash tag'
any\t'Whoever asks first once the lock is free (no queue)'"
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -s E -l conflict-exit-code -d 'Exit code when the lock was not acquired' -r
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l min-hold -d 'Keep the lock held until D after it was acquired, even if CMD ends or `release` comes sooner (the key keeps a TTL for the rest; no process lingers)' -r
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l owner -d 'Owner id to hold the lease as [default: a new <host>:<pid>:<random hex>]' -r
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -s r -l url -l redis-url -d 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]' -r
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l prefix -d 'Key prefix; locks live at PREFIX:{NAME}' -r
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l redis-password-file -d 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l tls-ca -d 'Trust the CA(s) in this PEM file for rediss:// instead of the system\'s' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l tls-cert -d 'Client certificate (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l tls-key -d 'Client private key (PEM) for mutual TLS; needs --tls-cert' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l min-replicas -d 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter' -r
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l json -d 'Print one JSON object instead of export lines'
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l tls-insecure -d 'Do not verify the server\'s certificate (testing only; warns every time)'
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -s q -l quiet -d 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -s V -l version -d 'Print version'
complete -c distlock -n "__fish_distlock_using_subcommand hold" -l limit -d 'Semaphore: let up to N holders in at once, each with its own lease (1: a plain lock). Every user of a name must pass the same N' -r
complete -c distlock -n "__fish_distlock_using_subcommand hold" -l ttl -d 'Lease length (`run` renews it while CMD runs; after `acquire`, renew it yourself)' -r
complete -c distlock -n "__fish_distlock_using_subcommand hold" -s w -l wait -d 'How long to wait for a busy lock: a duration, 0 (do not wait) or forever' -r
complete -c distlock -n "__fish_distlock_using_subcommand hold" -l wait-order -d 'Who gets a busy lock first: fair (arrival order) or any (no queue)' -r -f -a "fair\t'First come, first served: a queue under the lock\'s hash tag'
any\t'Whoever asks first once the lock is free (no queue)'"
complete -c distlock -n "__fish_distlock_using_subcommand hold" -s E -l conflict-exit-code -d 'Exit code when the lock was not acquired' -r
complete -c distlock -n "__fish_distlock_using_subcommand hold" -l min-hold -d 'Keep the lock held until D after it was acquired, even if CMD ends or `release` comes sooner (the key keeps a TTL for the rest; no process lingers)' -r
complete -c distlock -n "__fish_distlock_using_subcommand hold" -l owner -d 'Owner id to hold the lease as [default: a new <host>:<pid>:<random hex>]' -r
complete -c distlock -n "__fish_distlock_using_subcommand hold" -l max -d 'Release the lock after this long at the latest: a duration or forever' -r
complete -c distlock -n "__fish_distlock_using_subcommand hold" -s r -l url -l redis-url -d 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]' -r
complete -c distlock -n "__fish_distlock_using_subcommand hold" -l prefix -d 'Key prefix; locks live at PREFIX:{NAME}' -r
complete -c distlock -n "__fish_distlock_using_subcommand hold" -l redis-password-file -d 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand hold" -l tls-ca -d 'Trust the CA(s) in this PEM file for rediss:// instead of the system\'s' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand hold" -l tls-cert -d 'Client certificate (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand hold" -l tls-key -d 'Client private key (PEM) for mutual TLS; needs --tls-cert' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand hold" -l min-replicas -d 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter' -r
complete -c distlock -n "__fish_distlock_using_subcommand hold" -l json -d 'Print one JSON object instead of export lines'
complete -c distlock -n "__fish_distlock_using_subcommand hold" -l tls-insecure -d 'Do not verify the server\'s certificate (testing only; warns every time)'
complete -c distlock -n "__fish_distlock_using_subcommand hold" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c distlock -n "__fish_distlock_using_subcommand hold" -s q -l quiet -d 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
complete -c distlock -n "__fish_distlock_using_subcommand hold" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand hold" -s V -l version -d 'Print version'
complete -c distlock -n "__fish_distlock_using_subcommand __hold-renewer" -l limit -r
complete -c distlock -n "__fish_distlock_using_subcommand __hold-renewer" -l owner -d 'From the environment only: an owner id on the command line would show in `ps`, and anyone who knows it can release the lock' -r
complete -c distlock -n "__fish_distlock_using_subcommand __hold-renewer" -l ttl -r
complete -c distlock -n "__fish_distlock_using_subcommand __hold-renewer" -l t0-ns -d 'Boot-clock nanoseconds at which the acquisition was sent' -r
complete -c distlock -n "__fish_distlock_using_subcommand __hold-renewer" -l release-at-ns -d 'Boot-clock nanoseconds at which to release (none: never)' -r
complete -c distlock -n "__fish_distlock_using_subcommand __hold-renewer" -s r -l url -l redis-url -d 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]' -r
complete -c distlock -n "__fish_distlock_using_subcommand __hold-renewer" -l prefix -d 'Key prefix; locks live at PREFIX:{NAME}' -r
complete -c distlock -n "__fish_distlock_using_subcommand __hold-renewer" -l redis-password-file -d 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand __hold-renewer" -l tls-ca -d 'Trust the CA(s) in this PEM file for rediss:// instead of the system\'s' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand __hold-renewer" -l tls-cert -d 'Client certificate (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand __hold-renewer" -l tls-key -d 'Client private key (PEM) for mutual TLS; needs --tls-cert' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand __hold-renewer" -l min-replicas -d 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter' -r
complete -c distlock -n "__fish_distlock_using_subcommand __hold-renewer" -l tls-insecure -d 'Do not verify the server\'s certificate (testing only; warns every time)'
complete -c distlock -n "__fish_distlock_using_subcommand __hold-renewer" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c distlock -n "__fish_distlock_using_subcommand __hold-renewer" -s q -l quiet -d 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
complete -c distlock -n "__fish_distlock_using_subcommand __hold-renewer" -s h -l help -d 'Print help'
complete -c distlock -n "__fish_distlock_using_subcommand __hold-renewer" -s V -l version -d 'Print version'
complete -c distlock -n "__fish_distlock_using_subcommand renew" -l limit -d 'Semaphore: let up to N holders in at once, each with its own lease (1: a plain lock). Every user of a name must pass the same N' -r
complete -c distlock -n "__fish_distlock_using_subcommand renew" -l owner -d 'Owner id that must hold the lease' -r
complete -c distlock -n "__fish_distlock_using_subcommand renew" -l ttl -d 'New lease length, counted from now' -r
complete -c distlock -n "__fish_distlock_using_subcommand renew" -s r -l url -l redis-url -d 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]' -r
complete -c distlock -n "__fish_distlock_using_subcommand renew" -l prefix -d 'Key prefix; locks live at PREFIX:{NAME}' -r
complete -c distlock -n "__fish_distlock_using_subcommand renew" -l redis-password-file -d 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand renew" -l tls-ca -d 'Trust the CA(s) in this PEM file for rediss:// instead of the system\'s' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand renew" -l tls-cert -d 'Client certificate (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand renew" -l tls-key -d 'Client private key (PEM) for mutual TLS; needs --tls-cert' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand renew" -l min-replicas -d 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter' -r
complete -c distlock -n "__fish_distlock_using_subcommand renew" -l tls-insecure -d 'Do not verify the server\'s certificate (testing only; warns every time)'
complete -c distlock -n "__fish_distlock_using_subcommand renew" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c distlock -n "__fish_distlock_using_subcommand renew" -s q -l quiet -d 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
complete -c distlock -n "__fish_distlock_using_subcommand renew" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand renew" -s V -l version -d 'Print version'
complete -c distlock -n "__fish_distlock_using_subcommand release" -l limit -d 'Semaphore: let up to N holders in at once, each with its own lease (1: a plain lock). Every user of a name must pass the same N' -r
complete -c distlock -n "__fish_distlock_using_subcommand release" -l owner -d 'Owner id that must hold the lease (ignored with --force)' -r
complete -c distlock -n "__fish_distlock_using_subcommand release" -s r -l url -l redis-url -d 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]' -r
complete -c distlock -n "__fish_distlock_using_subcommand release" -l prefix -d 'Key prefix; locks live at PREFIX:{NAME}' -r
complete -c distlock -n "__fish_distlock_using_subcommand release" -l redis-password-file -d 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand release" -l tls-ca -d 'Trust the CA(s) in this PEM file for rediss:// instead of the system\'s' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand release" -l tls-cert -d 'Client certificate (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand release" -l tls-key -d 'Client private key (PEM) for mutual TLS; needs --tls-cert' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand release" -l min-replicas -d 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter' -r
complete -c distlock -n "__fish_distlock_using_subcommand release" -l force -d 'Release whoever holds it, and print who that was'
complete -c distlock -n "__fish_distlock_using_subcommand release" -l forget-done -d 'Delete only the done mark of `run --once-per`, so the next run starts CMD again; needs no owner and leaves a held lease alone. Not with --force or --owner (DISTLOCK_OWNER in the environment is ignored)'
complete -c distlock -n "__fish_distlock_using_subcommand release" -l tls-insecure -d 'Do not verify the server\'s certificate (testing only; warns every time)'
complete -c distlock -n "__fish_distlock_using_subcommand release" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c distlock -n "__fish_distlock_using_subcommand release" -s q -l quiet -d 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
complete -c distlock -n "__fish_distlock_using_subcommand release" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand release" -s V -l version -d 'Print version'
complete -c distlock -n "__fish_distlock_using_subcommand inspect" -l limit -d 'Semaphore: let up to N holders in at once, each with its own lease (1: a plain lock). Every user of a name must pass the same N' -r
complete -c distlock -n "__fish_distlock_using_subcommand inspect" -s r -l url -l redis-url -d 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]' -r
complete -c distlock -n "__fish_distlock_using_subcommand inspect" -l prefix -d 'Key prefix; locks live at PREFIX:{NAME}' -r
complete -c distlock -n "__fish_distlock_using_subcommand inspect" -l redis-password-file -d 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand inspect" -l tls-ca -d 'Trust the CA(s) in this PEM file for rediss:// instead of the system\'s' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand inspect" -l tls-cert -d 'Client certificate (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand inspect" -l tls-key -d 'Client private key (PEM) for mutual TLS; needs --tls-cert' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand inspect" -l min-replicas -d 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter' -r
complete -c distlock -n "__fish_distlock_using_subcommand inspect" -l json -d 'Print one JSON object'
complete -c distlock -n "__fish_distlock_using_subcommand inspect" -l tls-insecure -d 'Do not verify the server\'s certificate (testing only; warns every time)'
complete -c distlock -n "__fish_distlock_using_subcommand inspect" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c distlock -n "__fish_distlock_using_subcommand inspect" -s q -l quiet -d 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
complete -c distlock -n "__fish_distlock_using_subcommand inspect" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand inspect" -s V -l version -d 'Print version'
complete -c distlock -n "__fish_distlock_using_subcommand history" -s n -l count -d 'Show the newest N records' -r
complete -c distlock -n "__fish_distlock_using_subcommand history" -s r -l url -l redis-url -d 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]' -r
complete -c distlock -n "__fish_distlock_using_subcommand history" -l prefix -d 'Key prefix; locks live at PREFIX:{NAME}' -r
complete -c distlock -n "__fish_distlock_using_subcommand history" -l redis-password-file -d 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand history" -l tls-ca -d 'Trust the CA(s) in this PEM file for rediss:// instead of the system\'s' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand history" -l tls-cert -d 'Client certificate (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand history" -l tls-key -d 'Client private key (PEM) for mutual TLS; needs --tls-cert' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand history" -l min-replicas -d 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter' -r
complete -c distlock -n "__fish_distlock_using_subcommand history" -l json -d 'Print a JSON array of records'
complete -c distlock -n "__fish_distlock_using_subcommand history" -l tls-insecure -d 'Do not verify the server\'s certificate (testing only; warns every time)'
complete -c distlock -n "__fish_distlock_using_subcommand history" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c distlock -n "__fish_distlock_using_subcommand history" -s q -l quiet -d 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
complete -c distlock -n "__fish_distlock_using_subcommand history" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand history" -s V -l version -d 'Print version'
complete -c distlock -n "__fish_distlock_using_subcommand list" -s r -l url -l redis-url -d 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]' -r
complete -c distlock -n "__fish_distlock_using_subcommand list" -l prefix -d 'Key prefix; locks live at PREFIX:{NAME}' -r
complete -c distlock -n "__fish_distlock_using_subcommand list" -l redis-password-file -d 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand list" -l tls-ca -d 'Trust the CA(s) in this PEM file for rediss:// instead of the system\'s' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand list" -l tls-cert -d 'Client certificate (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand list" -l tls-key -d 'Client private key (PEM) for mutual TLS; needs --tls-cert' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand list" -l min-replicas -d 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter' -r
complete -c distlock -n "__fish_distlock_using_subcommand list" -l json -d 'Print a JSON array of `inspect --json` objects'
complete -c distlock -n "__fish_distlock_using_subcommand list" -l tls-insecure -d 'Do not verify the server\'s certificate (testing only; warns every time)'
complete -c distlock -n "__fish_distlock_using_subcommand list" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c distlock -n "__fish_distlock_using_subcommand list" -s q -l quiet -d 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
complete -c distlock -n "__fish_distlock_using_subcommand list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand list" -s V -l version -d 'Print version'
complete -c distlock -n "__fish_distlock_using_subcommand doctor" -s r -l url -l redis-url -d 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]' -r
complete -c distlock -n "__fish_distlock_using_subcommand doctor" -l prefix -d 'Key prefix; locks live at PREFIX:{NAME}' -r
complete -c distlock -n "__fish_distlock_using_subcommand doctor" -l redis-password-file -d 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand doctor" -l tls-ca -d 'Trust the CA(s) in this PEM file for rediss:// instead of the system\'s' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand doctor" -l tls-cert -d 'Client certificate (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand doctor" -l tls-key -d 'Client private key (PEM) for mutual TLS; needs --tls-cert' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand doctor" -l min-replicas -d 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter' -r
complete -c distlock -n "__fish_distlock_using_subcommand doctor" -l json -d 'Print a JSON array of {check, verdict, detail, advice}'
complete -c distlock -n "__fish_distlock_using_subcommand doctor" -l tls-insecure -d 'Do not verify the server\'s certificate (testing only; warns every time)'
complete -c distlock -n "__fish_distlock_using_subcommand doctor" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c distlock -n "__fish_distlock_using_subcommand doctor" -s q -l quiet -d 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
complete -c distlock -n "__fish_distlock_using_subcommand doctor" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand doctor" -s V -l version -d 'Print version'
complete -c distlock -n "__fish_distlock_using_subcommand completions" -s r -l url -l redis-url -d 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]' -r
complete -c distlock -n "__fish_distlock_using_subcommand completions" -l prefix -d 'Key prefix; locks live at PREFIX:{NAME}' -r
complete -c distlock -n "__fish_distlock_using_subcommand completions" -l redis-password-file -d 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand completions" -l tls-ca -d 'Trust the CA(s) in this PEM file for rediss:// instead of the system\'s' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand completions" -l tls-cert -d 'Client certificate (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand completions" -l tls-key -d 'Client private key (PEM) for mutual TLS; needs --tls-cert' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand completions" -l min-replicas -d 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter' -r
complete -c distlock -n "__fish_distlock_using_subcommand completions" -l tls-insecure -d 'Do not verify the server\'s certificate (testing only; warns every time)'
complete -c distlock -n "__fish_distlock_using_subcommand completions" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c distlock -n "__fish_distlock_using_subcommand completions" -s q -l quiet -d 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
complete -c distlock -n "__fish_distlock_using_subcommand completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand completions" -s V -l version -d 'Print version'
complete -c distlock -n "__fish_distlock_using_subcommand man" -l dir -d 'Directory to write distlock.1 and one page per subcommand into' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand man" -s r -l url -l redis-url -d 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]' -r
complete -c distlock -n "__fish_distlock_using_subcommand man" -l prefix -d 'Key prefix; locks live at PREFIX:{NAME}' -r
complete -c distlock -n "__fish_distlock_using_subcommand man" -l redis-password-file -d 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand man" -l tls-ca -d 'Trust the CA(s) in this PEM file for rediss:// instead of the system\'s' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand man" -l tls-cert -d 'Client certificate (PEM) for mutual TLS; needs --tls-key' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand man" -l tls-key -d 'Client private key (PEM) for mutual TLS; needs --tls-cert' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand man" -l min-replicas -d 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter' -r
complete -c distlock -n "__fish_distlock_using_subcommand man" -l exit-table -d 'Print the README\'s exit-code table (Markdown) on stdout instead, for scripts/gen-assets.sh and tests/it/assets.rs'
complete -c distlock -n "__fish_distlock_using_subcommand man" -l tls-insecure -d 'Do not verify the server\'s certificate (testing only; warns every time)'
complete -c distlock -n "__fish_distlock_using_subcommand man" -s v -l verbose -d 'Say more on stderr (repeat for more)'
complete -c distlock -n "__fish_distlock_using_subcommand man" -s q -l quiet -d 'Print nothing on stderr except the error line of a failure (exit 2 or 125)'
complete -c distlock -n "__fish_distlock_using_subcommand man" -s h -l help -d 'Print help'
complete -c distlock -n "__fish_distlock_using_subcommand man" -s V -l version -d 'Print version'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from run acquire hold __hold-renewer renew release inspect history list doctor completions man help" -f -a "run" -d 'Run CMD while holding the lock NAME; renew the lease while it runs'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from run acquire hold __hold-renewer renew release inspect history list doctor completions man help" -f -a "acquire" -d 'Take the lock NAME and print shell lines to eval (for scripts)'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from run acquire hold __hold-renewer renew release inspect history list doctor completions man help" -f -a "hold" -d 'Take NAME and keep renewing it from a background process until `distlock release` (for locks that span several CI steps)'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from run acquire hold __hold-renewer renew release inspect history list doctor completions man help" -f -a "__hold-renewer" -d 'Internal: the background renewer of `distlock hold`'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from run acquire hold __hold-renewer renew release inspect history list doctor completions man help" -f -a "renew" -d 'Extend the lease on NAME if OWNER still holds it'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from run acquire hold __hold-renewer renew release inspect history list doctor completions man help" -f -a "release" -d 'Release NAME if OWNER holds it (or whoever holds it, with --force)'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from run acquire hold __hold-renewer renew release inspect history list doctor completions man help" -f -a "inspect" -d 'Show who holds NAME, for how long, and the last fencing token'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from run acquire hold __hold-renewer renew release inspect history list doctor completions man help" -f -a "history" -d 'Show how the last runs of NAME ended, newest first'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from run acquire hold __hold-renewer renew release inspect history list doctor completions man help" -f -a "list" -d 'List every held lock under the prefix, sorted by name'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from run acquire hold __hold-renewer renew release inspect history list doctor completions man help" -f -a "doctor" -d 'Check the Redis or etcd that the URL points at: is it safe for leases?'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from run acquire hold __hold-renewer renew release inspect history list doctor completions man help" -f -a "completions" -d 'Print shell completions for SHELL on stdout'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from run acquire hold __hold-renewer renew release inspect history list doctor completions man help" -f -a "man" -d 'Write man pages into DIR (used to regenerate man/)'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from run acquire hold __hold-renewer renew release inspect history list doctor completions man help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
