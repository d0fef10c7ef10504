//! The link to the API server and the plane itself: a black hole over a deadline (4), a slow link (8), the
//! API server or etcd killed (3).

use super::*;

/// 4. A 30 s black hole between the only controller and the API server while a stall deadline passes
/// (the Lease expires meanwhile): acted on as soon as it heals.
#[tokio::test]
async fn a_thirty_second_black_hole_over_a_deadline_is_acted_on_when_it_heals() {
    let Some(s) = scene("black-hole").await else { return };
    let (c, ns) = (&s.client, s.ns.as_str());
    apply_policy(c, ns, &stall_policy()).await;
    let r = Replica::start(&s, "only", true);
    wait_for_leader(c, ns, &["only"]).await;
    wait_until_watching(c, ns, "stall", 0).await;
    let (names, deadline) = stalling_jobs(c, ns, "job", 1).await;
    wait_until_watching(c, ns, "stall", 1).await;
    sleep_until(Timestamp::from_second(deadline.as_second() - 2).unwrap()).await;
    r.proxy.black_hole();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(!suspended(&job(c, ns, &names[0]).await));
    r.proxy.heal();
    let healed = Timestamp::now();
    let seen = wait_all_suspended(c, ns, &names, Duration::from_secs(45)).await;
    let v = verdict(c, ns, &names).await;
    record(&Row {
        scenario: "4. 30 s black hole over the deadline (time after healing)",
        expected: 1,
        performed: v.performed,
        doubled: v.doubled,
        lost: v.lost,
        recovered_in: since(healed, Some(seen)),
    });
}

/// 8. A slow link over a deadline (toxiproxy's latency and bandwidth toxics): 400 ms each way on every
/// chunk and 16 KiB/s each direction between the only controller and the API server. Its Lease renewals,
/// watches and writes still fit its 2 s API timeout: the stall is acted on, once, a little late.
#[tokio::test]
async fn a_slow_link_over_a_deadline_delays_the_action_and_does_not_double_it() {
    let Some(s) = scene("slow-link").await else { return };
    let (c, ns) = (&s.client, s.ns.as_str());
    apply_policy(c, ns, &stall_policy()).await;
    let r = Replica::start(&s, "only", true);
    wait_for_leader(c, ns, &["only"]).await;
    wait_until_watching(c, ns, "stall", 0).await;
    let (names, deadline) = stalling_jobs(c, ns, "job", 1).await;
    wait_until_watching(c, ns, "stall", 1).await;
    sleep_until(Timestamp::from_second(deadline.as_second() - 2).unwrap()).await;
    r.proxy.degrade(Duration::from_millis(400), 16 * 1024);
    let seen = wait_all_suspended(c, ns, &names, Duration::from_secs(45)).await;
    // Still degraded while a repeat would come: the next evaluations see the job stalled and suspended.
    tokio::time::sleep(Duration::from_secs(5)).await;
    r.proxy.heal();
    let v = verdict(c, ns, &names).await;
    assert_eq!(lease_holder(c, ns).await.as_deref(), Some("only"), "the Lease was kept over the slow link");
    let status = eventually("counted", Duration::from_secs(10), || async {
        let st = policy_status(c, ns, "stall").await;
        (st.action_counts.values().sum::<i64>() >= 1).then_some(st)
    })
    .await;
    assert_eq!(status.action_counts.get("suspend/done"), Some(&1), "{:?}", status.action_counts);
    assert_eq!(status.action_counts.values().sum::<i64>(), 1, "{:?}", status.action_counts);
    record(&Row {
        scenario: "8. slow link over the deadline: 400 ms per chunk each way, 16 KiB/s (time after the deadline)",
        expected: 1,
        performed: v.performed,
        doubled: v.doubled,
        lost: v.lost,
        recovered_in: since(deadline, Some(seen)),
    });
}

/// 3. kube-apiserver, then etcd, `kill -9`ed just before a deadline and started again 8 s later: the
/// controller (leader election on) acts once each is back. Each round has its own namespace and replica.
#[tokio::test]
async fn the_api_server_or_etcd_killed_over_a_deadline_delays_the_action_and_does_not_lose_it() {
    let Some(s) = scene("plane-killed").await else { return };
    let c = &s.client;
    for (component, prefix, label) in [
        (
            Component::ApiServer,
            "apiserver",
            "3a. kube-apiserver killed over the deadline (time after it is back)",
        ),
        (Component::Etcd, "etcd", "3b. etcd killed over the deadline (time after it is back)"),
    ] {
        let ns = namespace(c, &format!("fault-{prefix}")).await;
        let ns = ns.as_str();
        let round = Scene {
            client: c.clone(),
            ns: ns.to_string(),
            plane: s.plane,
            dir: s.dir.clone(),
            _serial: None,
        };
        apply_policy(c, ns, &stall_policy()).await;
        let _r = Replica::start(&round, prefix, true);
        wait_for_leader(c, ns, &[prefix]).await;
        wait_until_watching(c, ns, "stall", 0).await;
        let (names, deadline) = stalling_jobs(c, ns, "job", 1).await;
        wait_until_watching(c, ns, "stall", 1).await;
        sleep_until(Timestamp::from_second(deadline.as_second() - 1).unwrap()).await;
        s.plane.kill(component);
        tokio::time::sleep(Duration::from_secs(8)).await;
        s.plane.revive(component);
        let back = Timestamp::now();
        let seen = wait_all_suspended(c, ns, &names, Duration::from_secs(45)).await;
        let v = verdict(c, ns, &names).await;
        record(&Row {
            scenario: label,
            expected: 1,
            performed: v.performed,
            doubled: v.doubled,
            lost: v.lost,
            recovered_in: since(back, Some(seen)),
        });
    }
}
