//! One session of the suite: a `nats-server` with JetStream in a temp
//! dir, the scripted model server, 2-3 `troupe worker`s (each in a network
//! namespace of its own when the machine allows), a `troupe exec --nats`
//! coordinator whose root spawns two worktree children (they go to the
//! workers) and merges them; the schedule's faults injected while it
//! runs; then the outcome the invariants are checked on.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use troupe_test_support::e2e::{Server, session_dirs};
use troupe_test_support::git::{ALLOW_UNVERIFIED, repo_at};
use troupe_test_support::nats::NatsServer;
use troupe_test_support::netns::NetNs;
use troupe_test_support::process::{Worker, signal, worker_args};
use troupe_testkit::{Reply, Script, ToolCallSpec};

use crate::check::{CHILDREN, STEPS, call_id, notes, step_line};
use crate::disk::Tmpfs;
use crate::schedule::{Fault, Kind, Schedule};

/// The workers' JetStream ack wait (s): a silent worker's task is
/// redelivered after it.
const ACK_WAIT: &str = "2";
/// The model's delay per child reply.
const MODEL_MS: u64 = 250;
/// How long one coordinator process may run.
const COORDINATOR_LIMIT: Duration = Duration::from_secs(150);
/// Resumes tried after a coordinator that did not exit 0.
const RESUMES: usize = 2;

/// What the machine allows.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    /// Network namespaces (root and iproute2).
    pub netns: bool,
    /// tmpfs mounts (root).
    pub tmpfs: bool,
}

/// What one session did and left.
pub struct Ran {
    /// The faults injected, with what each hit.
    pub injected: Vec<(Kind, String)>,
    /// Resumes after a coordinator that did not exit 0 (a coordinator
    /// kill's own resume is not one).
    pub resumes: usize,
    /// Whether the last coordinator process exited 0.
    pub exited_ok: bool,
    /// The coordinator's log.
    pub log: String,
    /// The side file.
    pub side: String,
    /// (child, steps.txt, notes.txt) in the workspace after the run.
    pub merged: Vec<(String, String, String)>,
    /// The coordinators' stderr, the workers' logs (for a failure's
    /// report), under the session's temp dir, which is kept on failure.
    pub dir: tempfile::TempDir,
}

/// The children's and root's conversations, picked by history so a
/// resumed agent is asked what a real model would be.
fn script(side: &Path) -> Script {
    let mut script = Script::replies(vec![]);
    for child in CHILDREN {
        let mut replies: Vec<Reply> = (1..=STEPS)
            .map(|k| {
                let line = step_line(child, k);
                Reply::tool_call(
                    call_id(child, k),
                    "exec_command",
                    json!({"command": format!("mkdir -p {child} && echo '{line}' >> {child}/steps.txt && echo {child}-{k} >> {}", side.display())}),
                )
                .with_delay_ms(MODEL_MS)
            })
            .collect();
        replies.push(
            Reply::tool_call(
                format!("{child}w"),
                "write_file",
                json!({"path": format!("{child}/notes.txt"), "content": notes(child)}),
            )
            .with_delay_ms(MODEL_MS),
        );
        replies.push(Reply::tool_call(
            format!("{child}h"),
            "handoff",
            json!({"state_summary": format!("{child} done"), "boundary_status": [{"name": child, "status": "done"}], "modified_files": [format!("{child}/steps.txt"), format!("{child}/notes.txt")]}),
        ));
        replies.push(Reply::text(format!("{child} done")));
        script = script.with_history_route(format!("Do chaos part {child}"), replies);
    }
    let spawn = |c: &str| {
        ToolCallSpec::new(
            format!("s{c}"),
            "spawn_subagent",
            json!({"name": c, "task": format!("Do chaos part {c}."), "isolation": "worktree", "sandbox": "danger-full-access"}),
        )
    };
    let merge = |c: &str| ToolCallSpec::new(format!("m{c}"), "merge_worktree", json!({"name": c}));
    // The children's routes first: a child's orientation quotes the
    // session's task, which the root's route matches.
    script.with_history_route(
        "Run the chaos parts",
        vec![
            Reply::tool_calls(CHILDREN.iter().map(|c| spawn(c)).collect()),
            Reply::tool_calls(CHILDREN.iter().map(|c| merge(c)).collect()),
            Reply::text("merged"),
        ],
    )
}

/// A worker slot: its namespace and tmpfs (when the machine has them)
/// and the worker running in it now.
struct Slot {
    ns: Option<NetNs>,
    disk: Option<Tmpfs>,
    worker: Worker,
    generation: usize,
    cut: bool,
    stopped: bool,
}

/// The coordinator process running now.
struct Coordinator {
    child: Child,
    started: Instant,
    stopped: bool,
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Env<'a> {
    bin: &'a Path,
    dir: PathBuf,
    ws: PathBuf,
    nats: NatsServer,
    server: Server,
    slots: Vec<Slot>,
    runs: usize,
}

impl Env<'_> {
    fn start_worker(
        &self,
        i: usize,
        generation: usize,
        ns: Option<&NetNs>,
        disk: Option<&Tmpfs>,
    ) -> Worker {
        let name = format!("w{i}g{generation}");
        let (mut cmd, nats, model) = match ns {
            Some(ns) => (
                ns.command(self.bin),
                self.nats.url_via(ns.host_ip()),
                self.server.url_via(ns.host_ip()),
            ),
            None => (Command::new(self.bin), self.nats.url(), self.server.url()),
        };
        let workdir = match disk {
            Some(d) => d.path().join(&name),
            None => self.dir.join(&name),
        };
        worker_args(
            &mut cmd,
            &nats,
            &model,
            &name,
            &workdir,
            &[
                "--ack-wait-secs",
                ACK_WAIT,
                "--sandbox",
                "danger-full-access",
            ],
        );
        Worker::spawn(cmd, &self.dir, &name)
    }

    /// What the last coordinator (or resume) wrote on stderr.
    fn last_log(&self) -> String {
        std::fs::read_to_string(self.dir.join(format!("coordinator{}.log", self.runs)))
            .unwrap_or_default()
    }

    fn coordinator(&mut self, args: &[&str]) -> Coordinator {
        self.runs += 1;
        let file = |ext: &str| {
            std::fs::File::create(self.dir.join(format!("coordinator{}.{ext}", self.runs)))
                .unwrap_or_else(|e| panic!("cannot create the coordinator's output: {e}"))
        };
        let mut cmd = Command::new(self.bin);
        cmd.args(args)
            .arg("--workspace")
            .arg(&self.ws)
            .current_dir(&self.ws)
            .env("TROUPE_LOG", "info")
            .env(
                "TROUPE_CONFIG_DIR",
                troupe_test_support::trust::config_dir(),
            )
            .env_remove("OPENAI_API_KEY")
            .env_remove("TROUPE_MODEL")
            .stdin(Stdio::null())
            .stdout(file("out"))
            .stderr(file("log"));
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.bin.display()));
        Coordinator {
            child,
            started: Instant::now(),
            stopped: false,
        }
    }

    fn session_id(&self) -> Option<String> {
        let dir = session_dirs(&self.ws).pop()?;
        dir.join("events.jsonl").exists().then(|| {
            dir.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
    }

    fn resume(&mut self) -> Option<Coordinator> {
        let id = self.session_id()?;
        let nats = self.nats.url();
        Some(self.coordinator(&["sessions", "resume", &id, "--nats", &nats]))
    }

    /// The workers running a task now (their log shows more `running`
    /// than finished tasks).
    fn busy(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&i| {
                let log = self.slots[i].worker.log();
                log.matches(" running").count()
                    > log.matches("finished; sending the handoff").count()
            })
            .collect()
    }

    fn pick(&self, pick: usize) -> usize {
        let busy = self.busy();
        if busy.is_empty() {
            pick % self.slots.len()
        } else {
            busy[pick % busy.len()]
        }
    }

    fn undo(&mut self, c: &mut Coordinator) {
        for s in &mut self.slots {
            if s.stopped
                && let Some(pid) = s.worker.pid()
            {
                let _ = Command::new("kill")
                    .args(["-CONT", &pid.to_string()])
                    .status();
                s.stopped = false;
            }
            if s.cut
                && let Some(ns) = &s.ns
            {
                ns.restore();
                s.cut = false;
            }
            if let Some(d) = &s.disk {
                d.free();
            }
        }
        if c.stopped {
            let _ = Command::new("kill")
                .args(["-CONT", &c.child.id().to_string()])
                .status();
            c.stopped = false;
        }
    }
}

fn running(c: &mut Coordinator) -> bool {
    matches!(c.child.try_wait(), Ok(None))
}

/// Sleeps `ms`, returning early (false) when the coordinator ended.
fn sleep_while_running(c: &mut Coordinator, ms: u64) -> bool {
    let until = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < until {
        if !c.stopped && !running(c) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c.stopped || running(c)
}

/// Waits for the coordinator's end within its limit (killed then): exit 0?
fn finish(c: &mut Coordinator) -> bool {
    loop {
        if let Ok(Some(status)) = c.child.try_wait() {
            return status.success();
        }
        if c.started.elapsed() > COORDINATOR_LIMIT {
            let _ = c.child.kill();
            let _ = c.child.wait();
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs the session of `schedule` with the troupe binary `bin`.
pub fn run(bin: &Path, schedule: &Schedule, caps: Caps) -> Ran {
    let dir = tempfile::Builder::new()
        .prefix("troupe-chaos-")
        .tempdir()
        .unwrap_or_else(|e| panic!("no temp dir: {e}"));
    let ws = dir.path().join("ws");
    let side = dir.path().join("side.txt");
    std::fs::create_dir_all(&ws).unwrap_or_else(|e| panic!("cannot create {}: {e}", ws.display()));
    repo_at(
        &ws,
        "initial",
        &[("README.md", "chaos\n"), ALLOW_UNVERIFIED],
    );
    let any = std::net::IpAddr::from([0, 0, 0, 0]);
    let (nats, server) = if caps.netns {
        (
            NatsServer::start_on(any),
            Server::with_script_on(script(&side), std::net::SocketAddr::new(any, 0)),
        )
    } else {
        (NatsServer::start(), Server::with_script(script(&side)))
    };
    let mut env = Env {
        bin,
        dir: dir.path().to_path_buf(),
        ws: ws.clone(),
        nats,
        server,
        slots: Vec::new(),
        runs: 0,
    };
    let disk_on: Vec<usize> = schedule
        .faults
        .iter()
        .filter(|f| f.kind == Kind::DiskFull)
        .map(|f| f.pick % schedule.workers)
        .collect();
    for i in 0..schedule.workers {
        let ns = caps.netns.then(NetNs::create);
        let disk = (caps.tmpfs && disk_on.contains(&i))
            .then(|| Tmpfs::mount(&env.dir.join(format!("disk{i}"))));
        let worker = env.start_worker(i, 0, ns.as_ref(), disk.as_ref());
        env.slots.push(Slot {
            ns,
            disk,
            worker,
            generation: 0,
            cut: false,
            stopped: false,
        });
    }
    let model = env.server.url();
    let nats_url = env.nats.url();
    let mut args = vec![
        "exec",
        "--base-url",
        &model,
        "--sandbox",
        "danger-full-access",
        "--nats",
        &nats_url,
    ];
    if schedule.approvals {
        args.extend(["-a", "untrusted"]);
    }
    args.push("Run the chaos parts.");
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut coordinator = env.coordinator(&refs);
    let approver = schedule
        .approvals
        .then(|| crate::approver::Approver::start(bin, &ws));
    // The faults start once a worker runs a task.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(60)
        && running(&mut coordinator)
        && env
            .slots
            .iter()
            .all(|s| !s.worker.log().contains(" running"))
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut injected = Vec::new();
    let mut resumes = 0;
    for fault in &schedule.faults {
        if !sleep_while_running(&mut coordinator, fault.delay_ms) {
            break;
        }
        if let Some(what) = inject(&mut env, &mut coordinator, fault) {
            injected.push((fault.kind, what));
        }
    }
    env.undo(&mut coordinator);
    let mut exited_ok = finish(&mut coordinator);
    let mut tries = 0;
    while !exited_ok && tries < RESUMES {
        tries += 1;
        let Some(mut c) = env.resume() else { break };
        resumes += 1;
        exited_ok = finish(&mut c);
        // Killed after its root's `thread.completed` success was written:
        // the session completed, and a resume is refused (exit 2) saying
        // so; the checker still reads the log's own verdict.
        if !exited_ok
            && env
                .last_log()
                .contains("already completed (success); nothing to resume")
        {
            exited_ok = true;
        }
    }
    drop(approver);
    let log = session_dirs(&ws)
        .pop()
        .and_then(|d| std::fs::read_to_string(d.join("events.jsonl")).ok())
        .unwrap_or_default();
    let merged = CHILDREN
        .iter()
        .map(|c| {
            let read = |f: &str| std::fs::read_to_string(ws.join(c).join(f)).unwrap_or_default();
            (c.to_string(), read("steps.txt"), read("notes.txt"))
        })
        .collect();
    drop(env);
    Ran {
        injected,
        resumes,
        exited_ok,
        log,
        side: std::fs::read_to_string(&side).unwrap_or_default(),
        merged,
        dir,
    }
}

/// Injects `fault`; what it hit, or `None` when it could not be (the
/// session not far enough along).
fn inject(env: &mut Env<'_>, c: &mut Coordinator, fault: &Fault) -> Option<String> {
    match fault.kind {
        Kind::WorkerKill => {
            let i = env.pick(fault.pick);
            let busy = env.busy().contains(&i);
            let s = &mut env.slots[i];
            s.worker.kill();
            s.generation += 1;
            let (generation, ns, disk) = (s.generation, s.ns.take(), s.disk.take());
            let worker = env.start_worker(i, generation, ns.as_ref(), disk.as_ref());
            let s = &mut env.slots[i];
            (s.ns, s.disk, s.worker) = (ns, disk, worker);
            s.cut = false;
            s.stopped = false;
            Some(format!("w{i}{}", if busy { " (busy)" } else { "" }))
        }
        Kind::WorkerStop => {
            let i = env.pick(fault.pick);
            let busy = env.busy().contains(&i);
            let pid = env.slots[i].worker.pid()?;
            signal(pid, "-STOP");
            env.slots[i].stopped = true;
            sleep_while_running(c, fault.hold_ms);
            signal(pid, "-CONT");
            env.slots[i].stopped = false;
            Some(format!(
                "w{i}{} {}ms",
                if busy { " (busy)" } else { "" },
                fault.hold_ms
            ))
        }
        Kind::Partition => {
            let i = env.pick(fault.pick);
            let busy = env.busy().contains(&i);
            let ns = env.slots[i].ns.as_ref()?;
            ns.cut();
            env.slots[i].cut = true;
            sleep_while_running(c, fault.hold_ms);
            if let Some(ns) = env.slots[i].ns.as_ref() {
                ns.restore();
            }
            env.slots[i].cut = false;
            Some(format!(
                "w{i}{} {}ms",
                if busy { " (busy)" } else { "" },
                fault.hold_ms
            ))
        }
        Kind::DiskFull => {
            let i = fault.pick % env.slots.len();
            let busy = env.busy().contains(&i);
            let disk = env.slots[i].disk.as_ref()?;
            disk.fill();
            sleep_while_running(c, fault.hold_ms);
            if let Some(d) = env.slots[i].disk.as_ref() {
                d.free();
            }
            Some(format!(
                "w{i}{} {}ms",
                if busy { " (busy)" } else { "" },
                fault.hold_ms
            ))
        }
        Kind::NatsRestart => {
            env.nats.restart();
            Some(String::new())
        }
        Kind::CoordinatorStop => {
            if !running(c) {
                return None;
            }
            signal(c.child.id(), "-STOP");
            c.stopped = true;
            std::thread::sleep(Duration::from_millis(fault.hold_ms));
            signal(c.child.id(), "-CONT");
            c.stopped = false;
            Some(format!("{}ms", fault.hold_ms))
        }
        Kind::CoordinatorKill => {
            // Only once its session exists (else there is nothing to resume).
            env.session_id()?;
            if !running(c) {
                return None;
            }
            let _ = c.child.kill();
            let _ = c.child.wait();
            std::thread::sleep(Duration::from_millis(fault.hold_ms));
            *c = env.resume()?;
            Some(format!("resumed after {}ms", fault.hold_ms))
        }
    }
}
