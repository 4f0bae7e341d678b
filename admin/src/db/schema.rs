//! The diesel table definitions, hand-kept and shared by both backends.
//!
//! Both migration sets (`migrations/sqlite`, `migrations/mysql`) must produce exactly these
//! columns; the `schema_matches_migrations` storage test checks that on each backend.

diesel::table! {
    executor_group (id) {
        id -> BigInt,
        app_name -> Text,
        title -> Text,
        address_mode -> Text,
        addresses -> Text,
        created_ms -> BigInt,
        updated_ms -> BigInt,
        agents_state -> Text,
        allow_executors -> Bool,
    }
}

diesel::table! {
    agent (id) {
        id -> BigInt,
        app_name -> Text,
        address -> Text,
        version -> Text,
        hostname -> Text,
        registered_ms -> BigInt,
        last_seen_ms -> BigInt,
        metrics -> Text,
        limits_mode -> Text,
        key_hash -> Text,
        approval -> Text,
        instance_id -> Text,
        run_as -> Text,
        mode -> Text,
        link_admin -> Text,
        link_since_ms -> Nullable<BigInt>,
        link_rtt_us -> Nullable<BigInt>,
        link_url -> Text,
        drained_ms -> Nullable<BigInt>,
        labels -> Text,
    }
}

diesel::table! {
    job (id) {
        id -> BigInt,
        group_id -> BigInt,
        name -> Text,
        description -> Text,
        schedule_type -> Text,
        schedule_expr -> Nullable<Text>,
        interval_s -> Nullable<BigInt>,
        once_at_ms -> Nullable<BigInt>,
        timezone -> Text,
        handler_type -> Text,
        command -> Nullable<Text>,
        script_source -> Nullable<Text>,
        script_version -> Integer,
        interpreter -> Nullable<Text>,
        bean_name -> Nullable<Text>,
        params -> Text,
        routing -> Text,
        enabled -> Bool,
        timeout_s -> BigInt,
        retry_count -> Integer,
        retry_backoff_s -> BigInt,
        limit_cpu -> Nullable<Double>,
        limit_memory_mb -> Nullable<BigInt>,
        limit_pids -> Nullable<BigInt>,
        misfire -> Text,
        concurrency -> Text,
        block_strategy -> Text,
        children -> Text,
        alert_on_failure -> Bool,
        alert_on_timeout -> Bool,
        alert_on_lost -> Bool,
        alert_channels -> Text,
        alert_on_no_agent -> Bool,
        next_fire_ms -> Nullable<BigInt>,
        created_ms -> BigInt,
        updated_ms -> BigInt,
        http_request -> Nullable<Text>,
        agent_labels -> Text,
        tags -> Text,
        start_deadline_s -> Nullable<BigInt>,
        keep_succeeded -> Nullable<Integer>,
        keep_failed -> Nullable<Integer>,
    }
}

diesel::table! {
    job_script (id) {
        id -> BigInt,
        job_id -> BigInt,
        version -> Integer,
        source -> Text,
        interpreter -> Text,
        note -> Text,
        created_by -> Text,
        created_ms -> BigInt,
    }
}

diesel::table! {
    job_run (id) {
        id -> BigInt,
        job_id -> BigInt,
        group_id -> BigInt,
        first_run_id -> Nullable<BigInt>,
        attempt -> Integer,
        trigger_kind -> Text,
        fire_slot_ms -> Nullable<BigInt>,
        scheduled_ms -> BigInt,
        status -> Text,
        agent_address -> Nullable<Text>,
        params -> Text,
        shard_index -> Integer,
        shard_total -> Integer,
        trigger_msg -> Nullable<Text>,
        triggered_ms -> Nullable<BigInt>,
        started_ms -> Nullable<BigInt>,
        finished_ms -> Nullable<BigInt>,
        handle_code -> Nullable<Integer>,
        handle_msg -> Nullable<Text>,
        exit_code -> Nullable<Integer>,
        term_signal -> Nullable<Integer>,
        cpu_ms -> Nullable<BigInt>,
        max_rss_kb -> Nullable<BigInt>,
        oom_killed -> Nullable<Bool>,
        limits_mode -> Nullable<Text>,
        created_ms -> BigInt,
        agent_instance -> Nullable<Text>,
        agent_seq -> Nullable<BigInt>,
        workflow_node_id -> Nullable<BigInt>,
        node_attempt -> Nullable<Integer>,
        timeout_s -> Nullable<BigInt>,
        env -> Nullable<Text>,
        outputs -> Nullable<Text>,
    }
}

diesel::table! {
    user (id) {
        id -> BigInt,
        username -> Text,
        password_hash -> Text,
        role -> Text,
        disabled -> Bool,
        password_changed_ms -> BigInt,
        created_ms -> BigInt,
        updated_ms -> BigInt,
    }
}

diesel::table! {
    user_group_grant (user_id, group_id) {
        user_id -> BigInt,
        group_id -> BigInt,
    }
}

diesel::table! {
    api_token (id) {
        id -> BigInt,
        user_id -> BigInt,
        name -> Text,
        token_hash -> Text,
        prefix -> Text,
        role -> Text,
        created_ms -> BigInt,
        expires_ms -> Nullable<BigInt>,
        revoked_ms -> Nullable<BigInt>,
        last_used_ms -> Nullable<BigInt>,
    }
}

diesel::table! {
    audit_log (id) {
        id -> BigInt,
        at_ms -> BigInt,
        actor_kind -> Text,
        actor_id -> Nullable<BigInt>,
        actor_name -> Text,
        ip -> Text,
        action -> Text,
        object_type -> Text,
        object_id -> Text,
        before_json -> Nullable<Text>,
        after_json -> Nullable<Text>,
        request_id -> Text,
    }
}

diesel::table! {
    scheduler_lock (name) {
        name -> Text,
        holder -> Text,
        until_ms -> BigInt,
    }
}

diesel::table! {
    run_report_daily (day, group_id, job_id) {
        day -> Text,
        group_id -> BigInt,
        job_id -> BigInt,
        succeeded -> BigInt,
        failed -> BigInt,
        timed_out -> BigInt,
        killed -> BigInt,
        lost -> BigInt,
        skipped -> BigInt,
        in_flight -> BigInt,
        durations -> Nullable<Text>,
        updated_ms -> BigInt,
    }
}

diesel::joinable!(job -> executor_group (group_id));
diesel::joinable!(job_script -> job (job_id));
diesel::joinable!(user_group_grant -> user (user_id));
diesel::joinable!(user_group_grant -> executor_group (group_id));
diesel::joinable!(api_token -> user (user_id));

diesel::allow_tables_to_appear_in_same_query!(
    executor_group,
    agent,
    job,
    job_script,
    job_run,
    user,
    user_group_grant,
    api_token,
    audit_log,
    scheduler_lock,
    run_report_daily,
);

diesel::table! {
    console_session (id_hash) {
        id_hash -> Text,
        user_id -> BigInt,
        csrf_token -> Text,
        ip -> Text,
        created_ms -> BigInt,
        last_seen_ms -> BigInt,
        expires_ms -> BigInt,
    }
}

diesel::table! {
    alert_channel (id) {
        id -> BigInt,
        name -> Text,
        kind -> Text,
        format -> Nullable<Text>,
        target -> Text,
        secret -> Nullable<Text>,
        enabled -> Bool,
        created_ms -> BigInt,
        updated_ms -> BigInt,
    }
}

diesel::table! {
    alert_event (id) {
        id -> BigInt,
        kind -> Text,
        job_id -> Nullable<BigInt>,
        group_id -> Nullable<BigInt>,
        run_id -> Nullable<BigInt>,
        channel_id -> BigInt,
        dedupe_key -> Text,
        title -> Text,
        body -> Text,
        status -> Text,
        attempts -> Integer,
        next_attempt_ms -> BigInt,
        claimed_ms -> Nullable<BigInt>,
        last_error -> Nullable<Text>,
        created_ms -> BigInt,
        sent_ms -> Nullable<BigInt>,
    }
}

diesel::table! {
    workflow (id) {
        id -> BigInt,
        group_id -> BigInt,
        name -> Text,
        description -> Text,
        definition -> Text,
        params -> Text,
        concurrency -> Text,
        timeout_s -> BigInt,
        alert_on_failure -> Bool,
        alert_channels -> Text,
        enabled -> Bool,
        created_ms -> BigInt,
        updated_ms -> BigInt,
        schedule_type -> Text,
        schedule_expr -> Nullable<Text>,
        interval_s -> Nullable<BigInt>,
        once_at_ms -> Nullable<BigInt>,
        timezone -> Text,
        misfire -> Text,
        next_fire_ms -> Nullable<BigInt>,
        pending_slot_ms -> Nullable<BigInt>,
        pending_at_ms -> Nullable<BigInt>,
    }
}

diesel::table! {
    workflow_run (id) {
        id -> BigInt,
        workflow_id -> BigInt,
        group_id -> BigInt,
        status -> Text,
        definition -> Text,
        params -> Text,
        trigger_kind -> Text,
        open_nodes -> Integer,
        unhandled_failures -> Integer,
        deadline_ms -> Nullable<BigInt>,
        message -> Text,
        created_ms -> BigInt,
        started_ms -> BigInt,
        finished_ms -> Nullable<BigInt>,
        fire_slot_ms -> Nullable<BigInt>,
    }
}

diesel::table! {
    workflow_node (id) {
        id -> BigInt,
        workflow_run_id -> BigInt,
        node_key -> Text,
        job_id -> BigInt,
        attempt -> Integer,
        status -> Text,
        upstream_total -> Integer,
        upstream_resolved -> Integer,
        upstream_met -> Integer,
        outputs -> Text,
        message -> Text,
        started_ms -> Nullable<BigInt>,
        finished_ms -> Nullable<BigInt>,
    }
}

diesel::table! {
    run_log (run_id) {
        run_id -> BigInt,
        state -> Text,
        content -> Text,
        bytes -> BigInt,
        truncated -> Bool,
        updated_ms -> BigInt,
    }
}

diesel::allow_tables_to_appear_in_same_query!(run_log, job_run);
