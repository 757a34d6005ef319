use std::sync::Arc;

use troupe_protocol::Usage;
use troupe_runtime::state::{BudgetNode, BudgetStatus, CostBudget};

fn tokens(n: u64) -> Usage {
    Usage {
        input_tokens: n,
        ..Usage::default()
    }
}

fn cost_cap(usd: f64) -> CostBudget {
    CostBudget {
        max_cost_usd: Some(usd),
        ..CostBudget::default()
    }
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-9)
}

#[test]
fn a_grandchild_exhausting_its_share_stops_only_itself() {
    let root = BudgetNode::root(cost_cap(10.0));
    let child = root.child("planner", 0.5, CostBudget::unlimited());
    let grandchild = child.child("worker", 0.4, CostBudget::unlimited());
    assert!(close(child.limits().max_cost_usd, 5.0));
    assert!(close(grandchild.limits().max_cost_usd, 2.0));
    assert!(close(grandchild.remaining_cost(), 2.0));

    assert_eq!(
        grandchild.charge(&tokens(10), Some(1.5), 1),
        BudgetStatus::Ok
    );
    assert_eq!(
        grandchild.charge(&tokens(10), Some(1.0), 1),
        BudgetStatus::CostLimitReached
    );
    assert_eq!(grandchild.status(), BudgetStatus::CostLimitReached);
    assert!(close(grandchild.remaining_cost(), 0.0));
    assert_eq!(child.status(), BudgetStatus::Ok);
    assert_eq!(root.status(), BudgetStatus::Ok);
    assert!(close(child.remaining_cost(), 2.5));
    assert!(close(root.remaining_cost(), 7.5));
    // A sibling spawned now gets its share of what is left.
    let sibling = child.child("worker-2", 0.5, CostBudget::unlimited());
    assert!(close(sibling.limits().max_cost_usd, 1.25));
}

#[test]
fn costs_roll_up_and_the_report_attributes_them_per_agent() {
    let root = BudgetNode::root_named("session", CostBudget::unlimited());
    let a = root.child("a", 1.0, CostBudget::unlimited());
    let b = root.child("b", 1.0, CostBudget::unlimited());
    let a1 = a.child("a1", 1.0, CostBudget::unlimited());
    root.charge(&tokens(1), Some(1.0), 1);
    a.charge(&tokens(20), Some(2.0), 2);
    b.charge(&tokens(300), Some(3.0), 3);
    a1.charge(&tokens(4000), Some(0.5), 4);

    let (usage, cost, steps) = root.spent();
    assert_eq!(usage.input_tokens, 4321);
    assert!(close(cost, 6.5));
    assert_eq!(steps, 10);
    let (usage, cost, steps) = a.spent();
    assert_eq!((usage.input_tokens, steps), (4020, 6));
    assert!(close(cost, 2.5));

    let report = root.report();
    let ids: Vec<&str> = report.iter().map(|r| r.agent_id.as_str()).collect();
    assert_eq!(ids, ["session", "a", "b", "a1"]);
    assert_eq!(report[3].parent_id.as_deref(), Some("a"));
    assert_eq!(report[0].parent_id, None);
    let sum: f64 = report.iter().map(|r| r.cost.unwrap()).sum();
    assert!(close(Some(sum), 6.5));
    assert_eq!(report.iter().map(|r| r.steps).sum::<u32>(), 10);
    assert!(close(report[1].cost, 2.0), "a's own cost includes a1's");
    let sub: Vec<String> = a.report().into_iter().map(|r| r.agent_id).collect();
    assert_eq!(sub, ["a", "a1"]);
}

#[test]
fn a_child_cannot_spend_past_what_its_parent_has_left() {
    let root = BudgetNode::root(cost_cap(10.0));
    let child = root.child("child", 0.5, CostBudget::unlimited());
    assert!(close(child.limits().max_cost_usd, 5.0));
    // The root (or a sibling) spends nearly everything.
    let sibling = root.child("sibling", 1.0, CostBudget::unlimited());
    assert_eq!(sibling.charge(&tokens(1), Some(9.8), 1), BudgetStatus::Ok);
    assert_eq!(child.status(), BudgetStatus::Ok);
    assert!(
        close(child.remaining_cost(), 0.2),
        "{:?}",
        child.remaining_cost()
    );
    // Well within its own 5.0, but past the root's 0.2.
    assert_eq!(
        child.charge(&tokens(1), Some(0.5), 1),
        BudgetStatus::CostLimitReached
    );
    let (_, own, _) = child.spent();
    assert!(close(own, 0.5));
    assert_eq!(root.status(), BudgetStatus::CostLimitReached);
    // Descendants spawned now get nothing.
    let late = root.child("late", 1.0, CostBudget::unlimited());
    assert!(close(late.limits().max_cost_usd, 0.0));
    assert_eq!(late.status(), BudgetStatus::CostLimitReached);
}

#[test]
fn own_limits_tighten_the_share() {
    let root = BudgetNode::root(cost_cap(10.0));
    let child = root.child("c", 0.8, cost_cap(1.0));
    assert!(close(child.limits().max_cost_usd, 1.0));
    assert_eq!(
        child.charge(&tokens(1), Some(1.0), 1),
        BudgetStatus::CostLimitReached
    );
    assert_eq!(root.status(), BudgetStatus::Ok);
    // Out-of-range shares are clamped.
    assert!(close(
        root.child("x", 7.0, CostBudget::unlimited())
            .limits()
            .max_cost_usd,
        9.0
    ));
    assert!(close(
        root.child("y", -1.0, CostBudget::unlimited())
            .limits()
            .max_cost_usd,
        0.0
    ));
    assert!(close(
        root.child("z", f64::NAN, CostBudget::unlimited())
            .limits()
            .max_cost_usd,
        0.0
    ));
}

#[test]
fn token_and_step_caps() {
    let root = BudgetNode::root(CostBudget {
        max_tokens: Some(1000),
        max_steps: Some(10),
        ..CostBudget::default()
    });
    let child = root.child(
        "c",
        0.5,
        CostBudget {
            max_steps: Some(3),
            ..CostBudget::default()
        },
    );
    assert_eq!(child.limits().max_tokens, Some(500));
    assert_eq!(child.limits().max_steps, Some(3));
    assert_eq!(child.remaining_tokens(), Some(500));
    let out = Usage {
        output_tokens: 99,
        ..tokens(400)
    };
    assert_eq!(child.charge(&out, None, 1), BudgetStatus::Ok);
    assert_eq!(
        child.charge(&tokens(1), None, 1),
        BudgetStatus::TokenLimitReached
    );
    assert_eq!(root.status(), BudgetStatus::Ok);
    assert_eq!(root.remaining_tokens(), Some(500));

    let other = root.child("d", 1.0, CostBudget::unlimited());
    assert_eq!(other.limits().max_steps, Some(8));
    assert_eq!(other.charge(&Usage::default(), None, 7), BudgetStatus::Ok);
    assert_eq!(other.remaining_steps(), Some(1));
    assert_eq!(
        other.charge(&Usage::default(), None, 1),
        BudgetStatus::StepLimitReached
    );
    assert_eq!(root.status(), BudgetStatus::StepLimitReached);
    assert_eq!(root.spent().2, 10);
}

#[test]
fn an_unknown_cost_disables_the_cost_cap_but_not_the_others() {
    let root = BudgetNode::root(CostBudget {
        max_cost_usd: Some(1.0),
        max_tokens: Some(100),
        ..CostBudget::default()
    });
    let child = root.child("c", 1.0, CostBudget::unlimited());
    assert_eq!(child.charge(&tokens(1), Some(0.9), 1), BudgetStatus::Ok);
    assert!(root.cost_known());
    // A model with no pricing.
    assert_eq!(child.charge(&tokens(1), None, 1), BudgetStatus::Ok);
    assert!(!child.cost_known() && !root.cost_known());
    assert_eq!(root.spent().1, None);
    assert_eq!(root.remaining_cost(), None);
    // Far past the cap: not enforced any more.
    assert_eq!(child.charge(&tokens(1), Some(5.0), 1), BudgetStatus::Ok);
    assert_eq!(root.status(), BudgetStatus::Ok);
    assert_eq!(
        child.charge(&tokens(97), Some(0.0), 1),
        BudgetStatus::TokenLimitReached
    );
    // A node whose own costs are known keeps its cap, even when a
    // sibling's unknown cost disabled the root's.
    let known_ok = BudgetNode::root(cost_cap(1.0));
    let k = known_ok.child("k", 1.0, cost_cap(0.1));
    known_ok
        .child("unpriced", 1.0, CostBudget::unlimited())
        .charge(&tokens(1), None, 1);
    assert_eq!(
        k.charge(&Usage::default(), Some(0.2), 0),
        BudgetStatus::CostLimitReached
    );
    // Invalid costs count as unknown.
    let r = BudgetNode::root(cost_cap(1.0));
    assert_eq!(
        r.charge(&Usage::default(), Some(f64::NAN), 0),
        BudgetStatus::Ok
    );
    assert!(!r.cost_known());
}

#[test]
fn cost_budget_check_reaches_a_limit_at_equality() {
    let b = CostBudget {
        max_tokens: Some(10),
        max_cost_usd: Some(1.0),
        max_steps: Some(2),
    };
    assert_eq!(b.check(&tokens(9), Some(0.99), 1), BudgetStatus::Ok);
    assert_eq!(
        b.check(&tokens(10), Some(0.0), 0),
        BudgetStatus::TokenLimitReached
    );
    assert_eq!(
        b.check(&tokens(0), Some(1.0), 0),
        BudgetStatus::CostLimitReached
    );
    assert_eq!(b.check(&tokens(0), None, 2), BudgetStatus::StepLimitReached);
    assert_eq!(b.check(&tokens(0), None, 1), BudgetStatus::Ok);
    assert_eq!(
        CostBudget::unlimited().check(&tokens(u64::MAX), Some(1e12), u32::MAX),
        BudgetStatus::Ok
    );
    assert_eq!(
        BudgetStatus::CostLimitReached.to_string(),
        "cost limit reached"
    );
    let json = serde_json::to_value(BudgetStatus::StepLimitReached).unwrap();
    assert_eq!(json, "step_limit_reached");
}

#[test]
fn concurrent_charges_all_roll_up() {
    let root = BudgetNode::root(CostBudget::unlimited());
    let leaves: Vec<Arc<BudgetNode>> = (0..4)
        .map(|i| {
            root.child(format!("c{i}"), 1.0, CostBudget::unlimited())
                .child(format!("g{i}"), 1.0, CostBudget::unlimited())
        })
        .collect();
    let handles: Vec<_> = leaves
        .into_iter()
        .map(|leaf| {
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    leaf.charge(&tokens(1), Some(0.25), 1);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let (usage, cost, steps) = root.spent();
    assert_eq!(usage.input_tokens, 4000);
    assert_eq!(steps, 4000);
    assert_eq!(cost, Some(1000.0));
    assert_eq!(root.report().len(), 9);
}
