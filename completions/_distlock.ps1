
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'distlock' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'distlock'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'distlock' {
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--redis-url', '--redis-url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Key prefix; locks live at PREFIX:{NAME}')
            [CompletionResult]::new('--redis-password-file', '--redis-password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Client private key (PEM) for mutual TLS; needs --tls-cert')
            [CompletionResult]::new('--min-replicas', '--min-replicas', [CompletionResultType]::ParameterName, 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not verify the server''s certificate (testing only; warns every time)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('run', 'run', [CompletionResultType]::ParameterValue, 'Run CMD while holding the lock NAME; renew the lease while it runs')
            [CompletionResult]::new('acquire', 'acquire', [CompletionResultType]::ParameterValue, 'Take the lock NAME and print shell lines to eval (for scripts)')
            [CompletionResult]::new('hold', 'hold', [CompletionResultType]::ParameterValue, 'Take NAME and keep renewing it from a background process until `distlock release` (for locks that span several CI steps)')
            [CompletionResult]::new('__hold-renewer', '__hold-renewer', [CompletionResultType]::ParameterValue, 'Internal: the background renewer of `distlock hold`')
            [CompletionResult]::new('renew', 'renew', [CompletionResultType]::ParameterValue, 'Extend the lease on NAME if OWNER still holds it')
            [CompletionResult]::new('release', 'release', [CompletionResultType]::ParameterValue, 'Release NAME if OWNER holds it (or whoever holds it, with --force)')
            [CompletionResult]::new('inspect', 'inspect', [CompletionResultType]::ParameterValue, 'Show who holds NAME, for how long, and the last fencing token')
            [CompletionResult]::new('history', 'history', [CompletionResultType]::ParameterValue, 'Show how the last runs of NAME ended, newest first')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'List every held lock under the prefix, sorted by name')
            [CompletionResult]::new('doctor', 'doctor', [CompletionResultType]::ParameterValue, 'Check the Redis or etcd that the URL points at: is it safe for leases?')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print shell completions for SHELL on stdout')
            [CompletionResult]::new('man', 'man', [CompletionResultType]::ParameterValue, 'Write man pages into DIR (used to regenerate man/)')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'distlock;run' {
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Semaphore: let up to N holders in at once, each with its own lease (1: a plain lock). Every user of a name must pass the same N')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Lease length (`run` renews it while CMD runs; after `acquire`, renew it yourself)')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'How long to wait for a busy lock: a duration, 0 (do not wait) or forever')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'How long to wait for a busy lock: a duration, 0 (do not wait) or forever')
            [CompletionResult]::new('--wait-order', '--wait-order', [CompletionResultType]::ParameterName, 'Who gets a busy lock first: fair (arrival order) or any (no queue)')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit code when the lock was not acquired')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit code when the lock was not acquired')
            [CompletionResult]::new('--min-hold', '--min-hold', [CompletionResultType]::ParameterName, 'Keep the lock held until D after it was acquired, even if CMD ends or `release` comes sooner (the key keeps a TTL for the rest; no process lingers)')
            [CompletionResult]::new('--renew-every', '--renew-every', [CompletionResultType]::ParameterName, 'Renewal period [default: ttl/3]')
            [CompletionResult]::new('--kill-signal', '--kill-signal', [CompletionResultType]::ParameterName, 'First signal sent to CMD''s process group when the lease is lost')
            [CompletionResult]::new('--kill-grace', '--kill-grace', [CompletionResultType]::ParameterName, 'Time between the kill signal and SIGKILL [default: min(5s, ttl/4)]')
            [CompletionResult]::new('--max-hold', '--max-hold', [CompletionResultType]::ParameterName, 'Stop CMD (kill signal, then SIGKILL after the grace) once it has held the lock for D; exit 124')
            [CompletionResult]::new('--at-risk-signal', '--at-risk-signal', [CompletionResultType]::ParameterName, 'Send SIG to CMD once, as soon as a renewal is overdue (half a period late) or has failed, so it can checkpoint before the kill deadline [default: none]')
            [CompletionResult]::new('--once-per', '--once-per', [CompletionResultType]::ParameterName, 'Once per window: after acquiring, start CMD only if no `run --once-per` of NAME succeeded (exited 0) less than D ago, by the server''s clock (on etcd D is whole seconds); otherwise exit with --done-exit-code. A success writes the done mark PREFIX:{NAME}:done, which expires D after that run acquired the lock. Not with --limit above 1')
            [CompletionResult]::new('--done-exit-code', '--done-exit-code', [CompletionResultType]::ParameterName, 'Exit code when --once-per finds the job already done in this window')
            [CompletionResult]::new('--last-run-keep', '--last-run-keep', [CompletionResultType]::ParameterName, 'How long the store keeps the record of the last run (who, when, how long, exit status, token)')
            [CompletionResult]::new('--history-keep', '--history-keep', [CompletionResultType]::ParameterName, 'How many records of its runs the store keeps for NAME (`distlock history`); 0 keeps none')
            [CompletionResult]::new('--metrics-file', '--metrics-file', [CompletionResultType]::ParameterName, 'When the run ends, write its metrics for node_exporter''s textfile collector (Prometheus text format) to PATH, atomically; a file that cannot be written is a warning')
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--redis-url', '--redis-url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Key prefix; locks live at PREFIX:{NAME}')
            [CompletionResult]::new('--redis-password-file', '--redis-password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Client private key (PEM) for mutual TLS; needs --tls-cert')
            [CompletionResult]::new('--min-replicas', '--min-replicas', [CompletionResultType]::ParameterName, 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not verify the server''s certificate (testing only; warns every time)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'distlock;acquire' {
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Semaphore: let up to N holders in at once, each with its own lease (1: a plain lock). Every user of a name must pass the same N')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Lease length (`run` renews it while CMD runs; after `acquire`, renew it yourself)')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'How long to wait for a busy lock: a duration, 0 (do not wait) or forever')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'How long to wait for a busy lock: a duration, 0 (do not wait) or forever')
            [CompletionResult]::new('--wait-order', '--wait-order', [CompletionResultType]::ParameterName, 'Who gets a busy lock first: fair (arrival order) or any (no queue)')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit code when the lock was not acquired')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit code when the lock was not acquired')
            [CompletionResult]::new('--min-hold', '--min-hold', [CompletionResultType]::ParameterName, 'Keep the lock held until D after it was acquired, even if CMD ends or `release` comes sooner (the key keeps a TTL for the rest; no process lingers)')
            [CompletionResult]::new('--owner', '--owner', [CompletionResultType]::ParameterName, 'Owner id to hold the lease as [default: a new <host>:<pid>:<random hex>]')
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--redis-url', '--redis-url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Key prefix; locks live at PREFIX:{NAME}')
            [CompletionResult]::new('--redis-password-file', '--redis-password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Client private key (PEM) for mutual TLS; needs --tls-cert')
            [CompletionResult]::new('--min-replicas', '--min-replicas', [CompletionResultType]::ParameterName, 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print one JSON object instead of export lines')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not verify the server''s certificate (testing only; warns every time)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'distlock;hold' {
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Semaphore: let up to N holders in at once, each with its own lease (1: a plain lock). Every user of a name must pass the same N')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Lease length (`run` renews it while CMD runs; after `acquire`, renew it yourself)')
            [CompletionResult]::new('-w', '-w', [CompletionResultType]::ParameterName, 'How long to wait for a busy lock: a duration, 0 (do not wait) or forever')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'How long to wait for a busy lock: a duration, 0 (do not wait) or forever')
            [CompletionResult]::new('--wait-order', '--wait-order', [CompletionResultType]::ParameterName, 'Who gets a busy lock first: fair (arrival order) or any (no queue)')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit code when the lock was not acquired')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit code when the lock was not acquired')
            [CompletionResult]::new('--min-hold', '--min-hold', [CompletionResultType]::ParameterName, 'Keep the lock held until D after it was acquired, even if CMD ends or `release` comes sooner (the key keeps a TTL for the rest; no process lingers)')
            [CompletionResult]::new('--owner', '--owner', [CompletionResultType]::ParameterName, 'Owner id to hold the lease as [default: a new <host>:<pid>:<random hex>]')
            [CompletionResult]::new('--max', '--max', [CompletionResultType]::ParameterName, 'Release the lock after this long at the latest: a duration or forever')
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--redis-url', '--redis-url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Key prefix; locks live at PREFIX:{NAME}')
            [CompletionResult]::new('--redis-password-file', '--redis-password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Client private key (PEM) for mutual TLS; needs --tls-cert')
            [CompletionResult]::new('--min-replicas', '--min-replicas', [CompletionResultType]::ParameterName, 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print one JSON object instead of export lines')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not verify the server''s certificate (testing only; warns every time)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'distlock;__hold-renewer' {
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'limit')
            [CompletionResult]::new('--owner', '--owner', [CompletionResultType]::ParameterName, 'From the environment only: an owner id on the command line would show in `ps`, and anyone who knows it can release the lock')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'ttl')
            [CompletionResult]::new('--t0-ns', '--t0-ns', [CompletionResultType]::ParameterName, 'Boot-clock nanoseconds at which the acquisition was sent')
            [CompletionResult]::new('--release-at-ns', '--release-at-ns', [CompletionResultType]::ParameterName, 'Boot-clock nanoseconds at which to release (none: never)')
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--redis-url', '--redis-url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Key prefix; locks live at PREFIX:{NAME}')
            [CompletionResult]::new('--redis-password-file', '--redis-password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Client private key (PEM) for mutual TLS; needs --tls-cert')
            [CompletionResult]::new('--min-replicas', '--min-replicas', [CompletionResultType]::ParameterName, 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not verify the server''s certificate (testing only; warns every time)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'distlock;renew' {
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Semaphore: let up to N holders in at once, each with its own lease (1: a plain lock). Every user of a name must pass the same N')
            [CompletionResult]::new('--owner', '--owner', [CompletionResultType]::ParameterName, 'Owner id that must hold the lease')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'New lease length, counted from now')
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--redis-url', '--redis-url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Key prefix; locks live at PREFIX:{NAME}')
            [CompletionResult]::new('--redis-password-file', '--redis-password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Client private key (PEM) for mutual TLS; needs --tls-cert')
            [CompletionResult]::new('--min-replicas', '--min-replicas', [CompletionResultType]::ParameterName, 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not verify the server''s certificate (testing only; warns every time)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'distlock;release' {
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Semaphore: let up to N holders in at once, each with its own lease (1: a plain lock). Every user of a name must pass the same N')
            [CompletionResult]::new('--owner', '--owner', [CompletionResultType]::ParameterName, 'Owner id that must hold the lease (ignored with --force)')
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--redis-url', '--redis-url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Key prefix; locks live at PREFIX:{NAME}')
            [CompletionResult]::new('--redis-password-file', '--redis-password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Client private key (PEM) for mutual TLS; needs --tls-cert')
            [CompletionResult]::new('--min-replicas', '--min-replicas', [CompletionResultType]::ParameterName, 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter')
            [CompletionResult]::new('--force', '--force', [CompletionResultType]::ParameterName, 'Release whoever holds it, and print who that was')
            [CompletionResult]::new('--forget-done', '--forget-done', [CompletionResultType]::ParameterName, 'Delete only the done mark of `run --once-per`, so the next run starts CMD again; needs no owner and leaves a held lease alone. Not with --force or --owner (DISTLOCK_OWNER in the environment is ignored)')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not verify the server''s certificate (testing only; warns every time)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'distlock;inspect' {
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Semaphore: let up to N holders in at once, each with its own lease (1: a plain lock). Every user of a name must pass the same N')
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--redis-url', '--redis-url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Key prefix; locks live at PREFIX:{NAME}')
            [CompletionResult]::new('--redis-password-file', '--redis-password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Client private key (PEM) for mutual TLS; needs --tls-cert')
            [CompletionResult]::new('--min-replicas', '--min-replicas', [CompletionResultType]::ParameterName, 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print one JSON object')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not verify the server''s certificate (testing only; warns every time)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'distlock;history' {
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Show the newest N records')
            [CompletionResult]::new('--count', '--count', [CompletionResultType]::ParameterName, 'Show the newest N records')
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--redis-url', '--redis-url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Key prefix; locks live at PREFIX:{NAME}')
            [CompletionResult]::new('--redis-password-file', '--redis-password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Client private key (PEM) for mutual TLS; needs --tls-cert')
            [CompletionResult]::new('--min-replicas', '--min-replicas', [CompletionResultType]::ParameterName, 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print a JSON array of records')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not verify the server''s certificate (testing only; warns every time)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'distlock;list' {
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--redis-url', '--redis-url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Key prefix; locks live at PREFIX:{NAME}')
            [CompletionResult]::new('--redis-password-file', '--redis-password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Client private key (PEM) for mutual TLS; needs --tls-cert')
            [CompletionResult]::new('--min-replicas', '--min-replicas', [CompletionResultType]::ParameterName, 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print a JSON array of `inspect --json` objects')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not verify the server''s certificate (testing only; warns every time)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'distlock;doctor' {
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--redis-url', '--redis-url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Key prefix; locks live at PREFIX:{NAME}')
            [CompletionResult]::new('--redis-password-file', '--redis-password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Client private key (PEM) for mutual TLS; needs --tls-cert')
            [CompletionResult]::new('--min-replicas', '--min-replicas', [CompletionResultType]::ParameterName, 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print a JSON array of {check, verdict, detail, advice}')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not verify the server''s certificate (testing only; warns every time)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'distlock;completions' {
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--redis-url', '--redis-url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Key prefix; locks live at PREFIX:{NAME}')
            [CompletionResult]::new('--redis-password-file', '--redis-password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Client private key (PEM) for mutual TLS; needs --tls-cert')
            [CompletionResult]::new('--min-replicas', '--min-replicas', [CompletionResultType]::ParameterName, 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not verify the server''s certificate (testing only; warns every time)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'distlock;man' {
            [CompletionResult]::new('--dir', '--dir', [CompletionResultType]::ParameterName, 'Directory to write distlock.1 and one page per subcommand into')
            [CompletionResult]::new('-r', '-r', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--url', '--url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--redis-url', '--redis-url', [CompletionResultType]::ParameterName, 'Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db], rediss://… (TLS), redis+unix:///path or unix:///path[?db=N], redis+sentinel://host:26379,host:26379/master[/db], redis+cluster://host:port,host:port, etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS) [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default: redis://127.0.0.1:6379]')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Key prefix; locks live at PREFIX:{NAME}')
            [CompletionResult]::new('--redis-password-file', '--redis-password-file', [CompletionResultType]::ParameterName, 'Read the Redis password from the first line of FILE (overrides DISTLOCK_REDIS_PASSWORD and a password in the URL)')
            [CompletionResult]::new('--tls-ca', '--tls-ca', [CompletionResultType]::ParameterName, 'Trust the CA(s) in this PEM file for rediss:// instead of the system''s')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Client certificate (PEM) for mutual TLS; needs --tls-key')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'Client private key (PEM) for mutual TLS; needs --tls-cert')
            [CompletionResult]::new('--min-replicas', '--min-replicas', [CompletionResultType]::ParameterName, 'Acquisitions and renewals count only once N replicas have them (Redis WAIT, bounded by the time left): a failover then keeps the lease and the fencing counter')
            [CompletionResult]::new('--exit-table', '--exit-table', [CompletionResultType]::ParameterName, 'Print the README''s exit-code table (Markdown) on stdout instead, for scripts/gen-assets.sh and tests/it/assets.rs')
            [CompletionResult]::new('--tls-insecure', '--tls-insecure', [CompletionResultType]::ParameterName, 'Do not verify the server''s certificate (testing only; warns every time)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'Say more on stderr (repeat for more)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Print nothing on stderr except the error line of a failure (exit 2 or 125)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'distlock;help' {
            [CompletionResult]::new('run', 'run', [CompletionResultType]::ParameterValue, 'Run CMD while holding the lock NAME; renew the lease while it runs')
            [CompletionResult]::new('acquire', 'acquire', [CompletionResultType]::ParameterValue, 'Take the lock NAME and print shell lines to eval (for scripts)')
            [CompletionResult]::new('hold', 'hold', [CompletionResultType]::ParameterValue, 'Take NAME and keep renewing it from a background process until `distlock release` (for locks that span several CI steps)')
            [CompletionResult]::new('__hold-renewer', '__hold-renewer', [CompletionResultType]::ParameterValue, 'Internal: the background renewer of `distlock hold`')
            [CompletionResult]::new('renew', 'renew', [CompletionResultType]::ParameterValue, 'Extend the lease on NAME if OWNER still holds it')
            [CompletionResult]::new('release', 'release', [CompletionResultType]::ParameterValue, 'Release NAME if OWNER holds it (or whoever holds it, with --force)')
            [CompletionResult]::new('inspect', 'inspect', [CompletionResultType]::ParameterValue, 'Show who holds NAME, for how long, and the last fencing token')
            [CompletionResult]::new('history', 'history', [CompletionResultType]::ParameterValue, 'Show how the last runs of NAME ended, newest first')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'List every held lock under the prefix, sorted by name')
            [CompletionResult]::new('doctor', 'doctor', [CompletionResultType]::ParameterValue, 'Check the Redis or etcd that the URL points at: is it safe for leases?')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print shell completions for SHELL on stdout')
            [CompletionResult]::new('man', 'man', [CompletionResultType]::ParameterValue, 'Write man pages into DIR (used to regenerate man/)')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'distlock;help;run' {
            break
        }
        'distlock;help;acquire' {
            break
        }
        'distlock;help;hold' {
            break
        }
        'distlock;help;__hold-renewer' {
            break
        }
        'distlock;help;renew' {
            break
        }
        'distlock;help;release' {
            break
        }
        'distlock;help;inspect' {
            break
        }
        'distlock;help;history' {
            break
        }
        'distlock;help;list' {
            break
        }
        'distlock;help;doctor' {
            break
        }
        'distlock;help;completions' {
            break
        }
        'distlock;help;man' {
            break
        }
        'distlock;help;help' {
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
