use super::*;

const OLD: &str = "rev-1";
const NEW: &str = "rev-2";

/// The seed document's 30-pod example: zone-1 and zone-2 hold these ordinals, zone-3 the rest.
const ZONE_1: [u32; 10] = [28, 27, 22, 19, 17, 15, 10, 8, 6, 1];
const ZONE_2: [u32; 10] = [29, 26, 23, 20, 16, 14, 11, 7, 5, 2];

fn pod(ordinal: u32, zone: &str, revision: &str) -> RolloutPod {
    RolloutPod {
        name: format!("web-{ordinal}"),
        ordinal,
        zone: Zone::known(zone),
        revision: revision.to_string(),
        update_revision: NEW.to_string(),
        ready: true,
        terminating: false,
    }
}

fn seed_pods() -> Vec<RolloutPod> {
    (0..30)
        .map(|ordinal| {
            let zone = if ZONE_1.contains(&ordinal) {
                "zone-1"
            } else if ZONE_2.contains(&ordinal) {
                "zone-2"
            } else {
                "zone-3"
            };
            pod(ordinal, zone, OLD)
        })
        .collect()
}

fn input(pods: &[RolloutPod], step: u32, max_unavailable: u32, factor: f64) -> RolloutInput<'_> {
    RolloutInput {
        replicas: u32::try_from(pods.len()).unwrap(),
        update_revision: NEW,
        last_update_revision: Some(NEW),
        step,
        last_zone: None,
        max_unavailable,
        exponential_factor: factor,
        pods,
    }
}

/// The batches of a whole rollout ([`preview`]) as ordinals, from a status that records no
/// revision yet (a rollout about to start); it must complete.
fn simulate(pods: Vec<RolloutPod>, max_unavailable: u32, factor: f64) -> Vec<Vec<u32>> {
    let mut start = input(&pods, 0, max_unavailable, factor);
    start.last_update_revision = None;
    let preview = preview(&start);
    assert_eq!(preview.stopped, None);
    preview
        .batches
        .iter()
        .map(|batch| {
            batch
                .pods
                .iter()
                .map(|name| {
                    let pod = pods.iter().find(|pod| &pod.name == name).unwrap();
                    assert_eq!(pod.zone, batch.zone);
                    pod.ordinal
                })
                .collect()
        })
        .collect()
}

/// A preview from a rollout under way: the step and zone reached, a pod terminating and an
/// updated one not Ready yet settle as the controller will see them; missing pods stop it.
#[test]
fn a_preview_continues_a_rollout_under_way() {
    let mut pods = seed_pods();
    for ordinal in [28, 27, 22] {
        pods[ordinal].revision = NEW.into();
    }
    pods[22].ready = false;
    pods[19].terminating = true;
    let zone_1 = Zone::known("zone-1");
    let mut under_way = input(&pods, 2, 4, 2.0);
    under_way.last_zone = Some(&zone_1);
    let ahead = preview(&under_way);
    assert_eq!(ahead.stopped, None);
    let first = &ahead.batches[0];
    assert_eq!((first.zone.clone(), first.step), (zone_1, 2));
    assert_eq!(first.pods, ["web-17", "web-15", "web-10", "web-8"]);
    let removed: usize = ahead.batches.iter().map(|b| b.pods.len()).sum();
    assert_eq!(removed, 26, "every old pod but the terminating one, once");

    let missing = &pods[1..];
    let mut short = input(missing, 2, 4, 2.0);
    short.replicas = 30;
    let stopped = preview(&short);
    assert!(stopped.batches.is_empty());
    assert_eq!(
        stopped.stopped,
        Some(WaitReason::MissingPods { missing: 1 })
    );
}

#[test]
fn seed_figure_with_exponential_factor_2() {
    let batches = simulate(seed_pods(), 4, 2.0);
    let expected: Vec<Vec<u32>> = vec![
        vec![28],
        vec![27, 22],
        vec![19, 17, 15, 10],
        vec![8, 6, 1],
        vec![29, 26, 23, 20],
        vec![16, 14, 11, 7],
        vec![5, 2],
        vec![25, 24, 21, 18],
        vec![13, 12, 9, 4],
        vec![3, 0],
    ];
    assert_eq!(batches, expected);
}

#[test]
fn seed_figure_with_exponential_factor_0() {
    let batches = simulate(seed_pods(), 4, 0.0);
    let expected: Vec<Vec<u32>> = vec![
        vec![28, 27, 22, 19],
        vec![17, 15, 10, 8],
        vec![6, 1],
        vec![29, 26, 23, 20],
        vec![16, 14, 11, 7],
        vec![5, 2],
        vec![25, 24, 21, 18],
        vec![13, 12, 9, 4],
        vec![3, 0],
    ];
    assert_eq!(batches, expected);
}

#[test]
fn fractional_factor_grows_by_its_floor() {
    let sizes: Vec<u32> = (0..7).map(|step| batch_size(1.5, step, 10)).collect();
    assert_eq!(sizes, [1, 1, 2, 3, 5, 7, 10]);
    assert_eq!(batch_size(1.0, 50, 4), 1);
    assert_eq!(
        batch_size(2.0, u32::MAX, 4),
        4,
        "huge steps saturate instead of overflowing"
    );
    assert_eq!(batch_size(0.0, 0, 3), 3);
}

#[test]
fn a_new_update_revision_resets_the_step() {
    let pods = seed_pods();
    let mut rollout = input(&pods, 5, 4, 2.0);
    rollout.last_update_revision = Some("rev-0");
    let (progress, plan) = plan(&rollout);
    assert_eq!(progress.step, 0);
    let Plan::Remove(batch) = plan else {
        panic!("expected a batch")
    };
    assert_eq!(
        (batch.pods, batch.step, batch.next_step),
        (vec!["web-28".to_string()], 0, 1)
    );
}

#[test]
fn waits_while_pods_terminate() {
    let mut pods = seed_pods();
    pods[3].terminating = true;
    let (_, plan) = plan(&input(&pods, 0, 4, 2.0));
    assert_eq!(
        plan,
        Plan::Wait(WaitReason::Terminating(vec!["web-3".into()]))
    );
}

#[test]
fn a_missing_pod_counts_as_unavailable() {
    let mut pods = seed_pods();
    pods.remove(28);
    let mut rollout = input(&pods, 0, 4, 2.0);
    rollout.replicas = 30;
    let (_, plan) = plan(&rollout);
    assert_eq!(plan, Plan::Wait(WaitReason::MissingPods { missing: 1 }));
}

#[test]
fn waits_for_updated_pods_to_become_ready() {
    let mut pods = seed_pods();
    pods[28].revision = NEW.into();
    pods[28].ready = false;
    let (_, plan) = plan(&input(&pods, 1, 4, 2.0));
    assert_eq!(
        plan,
        Plan::Wait(WaitReason::UpdatedNotReady(vec!["web-28".into()]))
    );
}

#[test]
fn unavailable_old_pods_in_one_later_zone_make_that_zone_go_first() {
    let mut pods = seed_pods();
    pods[0].ready = false; // zone-3, the last zone
    let (progress, plan) = plan(&input(&pods, 0, 4, 2.0));
    assert_eq!(progress.current_zone, Some(Zone::known("zone-3")));
    let Plan::Remove(batch) = plan else {
        panic!("expected a batch, got {plan:?}")
    };
    // Step 0 allows one unavailable pod, and web-0 already is: it is replaced, nothing else.
    assert_eq!(batch.zone, Zone::known("zone-3"));
    assert_eq!(batch.pods, vec!["web-0".to_string()]);
    assert_eq!(
        batch.next_step, 0,
        "no available pod removed, the step does not advance"
    );
}

#[test]
fn a_started_zone_is_finished_before_the_first_one() {
    // web-0 of zone-3 was down and has been replaced: zone-3 carries on, zone-1 waits.
    let mut pods = seed_pods();
    pods[0].revision = NEW.into();
    let zone_3 = Zone::known("zone-3");
    let mut started = input(&pods, 0, 4, 2.0);
    started.last_zone = Some(&zone_3);
    let (progress, plan) = plan(&started);
    assert_eq!(progress.current_zone, Some(zone_3.clone()));
    assert!(
        matches!(&plan, Plan::Remove(batch) if batch.zone == zone_3 && batch.pods == ["web-25"]),
        "{plan:?}"
    );

    // A new update revision starts over from the first zone.
    started.last_update_revision = Some(OLD);
    let (progress, _) = super::plan(&started);
    assert_eq!(progress.current_zone, Some(Zone::known("zone-1")));

    // So does a started zone with nothing old left.
    for pod in pods.iter_mut().filter(|pod| pod.zone == zone_3) {
        pod.revision = NEW.into();
    }
    let mut done = input(&pods, 0, 4, 2.0);
    done.last_zone = Some(&zone_3);
    let (progress, _) = super::plan(&done);
    assert_eq!(progress.current_zone, Some(Zone::known("zone-1")));
}

#[test]
fn already_unavailable_pods_are_subtracted_from_the_batch() {
    let mut pods = seed_pods();
    pods[1].ready = false; // zone-1
    let (_, plan) = plan(&input(&pods, 2, 4, 2.0));
    let Plan::Remove(batch) = plan else {
        panic!("expected a batch")
    };
    assert_eq!(batch.pods, vec!["web-1", "web-28", "web-27", "web-22"]);
    assert_eq!(batch.next_step, 3);
}

#[test]
fn unavailable_pods_in_two_zones_are_replaced_one_zone_at_a_time_without_touching_healthy_ones() {
    let mut pods = seed_pods();
    pods[1].ready = false; // zone-1
    pods[2].ready = false; // zone-2
    let (_, plan) = plan(&input(&pods, 3, 4, 2.0));
    let Plan::Remove(batch) = plan else {
        panic!("expected a batch, got {plan:?}")
    };
    assert_eq!(batch.zone, Zone::known("zone-1"));
    assert_eq!(batch.pods, vec!["web-1".to_string()]);
    assert_eq!(batch.next_step, 3);
}

#[test]
fn complete_when_everything_is_updated_and_ready() {
    let pods: Vec<RolloutPod> = (0..3).map(|i| pod(i, "zone-a", NEW)).collect();
    let (progress, plan) = plan(&input(&pods, 3, 1, 2.0));
    assert_eq!(plan, Plan::Complete);
    assert_eq!(progress.total_old(), 0);
    assert_eq!(progress.current_zone, None);
}

#[test]
fn progress_reports_old_replicas_per_zone() {
    let mut pods = seed_pods();
    for pod in pods.iter_mut().filter(|pod| ZONE_1.contains(&pod.ordinal)) {
        pod.revision = NEW.into();
    }
    let (progress, _) = plan(&input(&pods, 4, 4, 2.0));
    assert_eq!(progress.old_replicas[&Zone::known("zone-1")], 0);
    assert_eq!(progress.old_replicas[&Zone::known("zone-2")], 10);
    assert_eq!(progress.total_old(), 20);
    assert_eq!(progress.current_zone, Some(Zone::known("zone-2")));
}

#[test]
fn pods_of_unknown_zone_are_updated_last() {
    let mut pods = seed_pods();
    pods[0].zone = Zone::Unknown;
    for pod in pods.iter_mut().filter(|pod| pod.ordinal != 0) {
        pod.revision = NEW.into();
    }
    let (progress, plan) = plan(&input(&pods, 0, 4, 2.0));
    assert_eq!(progress.current_zone, Some(Zone::Unknown));
    assert!(matches!(plan, Plan::Remove(batch) if batch.pods == ["web-0"]));
}

#[test]
fn factor_validation() {
    assert_eq!(parse_exponential_factor("2.0"), Ok(2.0));
    assert_eq!(parse_exponential_factor("0"), Ok(0.0));
    assert_eq!(parse_exponential_factor("1"), Ok(1.0));
    assert_eq!(
        parse_exponential_factor(""),
        Ok(2.0),
        "empty means the default"
    );
    assert!(matches!(
        parse_exponential_factor("0.5"),
        Err(RolloutError::FactorOutOfRange(_))
    ));
    assert!(matches!(
        parse_exponential_factor("-2"),
        Err(RolloutError::FactorOutOfRange(_))
    ));
    assert!(matches!(
        parse_exponential_factor("NaN"),
        Err(RolloutError::FactorOutOfRange(_))
    ));
    assert!(matches!(
        parse_exponential_factor("inf"),
        Err(RolloutError::FactorOutOfRange(_))
    ));
    assert!(matches!(
        parse_exponential_factor("fast"),
        Err(RolloutError::FactorNotANumber(_))
    ));
}

#[test]
fn max_unavailable_validation() {
    assert_eq!(
        resolve_max_unavailable(IntOrPercent::Percent(25), 12),
        Ok(3)
    );
    assert_eq!(
        resolve_max_unavailable(IntOrPercent::Percent(25), 30),
        Ok(8)
    );
    assert_eq!(resolve_max_unavailable(IntOrPercent::Percent(1), 3), Ok(1));
    assert_eq!(resolve_max_unavailable(IntOrPercent::Int(4), 30), Ok(4));
    assert!(resolve_max_unavailable(IntOrPercent::Int(0), 30).is_err());
    assert!(resolve_max_unavailable(IntOrPercent::Percent(0), 30).is_err());
}

/// A rollout group: one StatefulSet per zone, each with its own update revision.
#[test]
fn a_groups_pods_are_old_against_their_own_statefulsets_revision() {
    let mut pods: Vec<RolloutPod> = ["a", "b", "c"]
        .iter()
        .flat_map(|set| {
            (0..3).map(move |ordinal| RolloutPod {
                name: format!("ingester-zone-{set}-{ordinal}"),
                update_revision: format!("{set}-2"),
                revision: format!("{set}-1"),
                ..pod(ordinal, &format!("zone-{set}"), OLD)
            })
        })
        .collect();
    // Another StatefulSet's update revision does not make a pod updated.
    pods[3].revision = "a-2".into();
    let group = "a=a-2,b=b-2,c=c-2";
    fn rollout<'a>(pods: &'a [RolloutPod], step: u32, group: &'a str) -> RolloutInput<'a> {
        RolloutInput {
            update_revision: group,
            last_update_revision: Some(group),
            ..input(pods, step, 2, 2.0)
        }
    }
    let (progress, plan) = super::plan(&rollout(&pods, 0, group));
    assert_eq!(progress.total_old(), 9);
    assert_eq!(progress.current_zone, Some(Zone::known("zone-a")));
    let Plan::Remove(batch) = plan else {
        panic!("expected a batch, got {plan:?}")
    };
    assert_eq!(batch.pods, ["ingester-zone-a-2"]);

    // zone-a done: zone-b next, its batches sized by the step reached.
    for pod in pods.iter_mut().filter(|pod| pod.name.contains("zone-a")) {
        pod.revision = pod.update_revision.clone();
    }
    let (progress, plan) = super::plan(&rollout(&pods, 2, group));
    assert_eq!(progress.old_replicas[&Zone::known("zone-a")], 0);
    let Plan::Remove(batch) = plan else {
        panic!("expected a batch, got {plan:?}")
    };
    assert_eq!(batch.zone, Zone::known("zone-b"));
    assert_eq!(batch.pods, ["ingester-zone-b-2", "ingester-zone-b-1"]);
}
