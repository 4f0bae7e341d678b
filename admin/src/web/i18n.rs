//! The console's two languages. A user's choice (the `jf_lang` cookie set on the account page)
//! wins; otherwise the browser's `Accept-Language` decides. Strings live in one table, keyed by
//! the names templates use, so a missing translation is a failing unit test, not a blank label.

use std::collections::HashMap;
use std::sync::LazyLock;

use actix_web::HttpRequest;
use actix_web::http::header::ACCEPT_LANGUAGE;

use super::LANG_COOKIE;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    En,
    ZhCn,
}

impl Lang {
    /// The BCP 47 tag, for `<html lang>` and the cookie.
    pub fn tag(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::ZhCn => "zh-CN",
        }
    }

    pub fn from_tag(tag: &str) -> Option<Lang> {
        let lower = tag.trim().to_ascii_lowercase();
        if lower == "en" || lower.starts_with("en-") {
            Some(Lang::En)
        } else if lower == "zh" || lower.starts_with("zh-") {
            Some(Lang::ZhCn)
        } else {
            None
        }
    }
}

/// The first language of `Accept-Language` (by q-value) that we speak; English otherwise.
pub fn from_accept_language(header: &str) -> Lang {
    let mut ranked: Vec<(f32, usize, &str)> = header
        .split(',')
        .enumerate()
        .filter_map(|(i, part)| {
            let mut pieces = part.split(';');
            let tag = pieces.next()?.trim();
            let q = pieces
                .find_map(|p| p.trim().strip_prefix("q="))
                .and_then(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            (q > 0.0 && !tag.is_empty()).then_some((q, i, tag))
        })
        .collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    ranked
        .iter()
        .find_map(|(_, _, tag)| Lang::from_tag(tag))
        .unwrap_or(Lang::En)
}

/// The language of this request.
pub fn lang_of(req: &HttpRequest) -> Lang {
    if let Some(lang) = req
        .cookie(LANG_COOKIE)
        .and_then(|c| Lang::from_tag(c.value()))
    {
        return lang;
    }
    req.headers()
        .get(ACCEPT_LANGUAGE)
        .and_then(|v| v.to_str().ok())
        .map(from_accept_language)
        .unwrap_or(Lang::En)
}

static INDEX: LazyLock<HashMap<&'static str, (&'static str, &'static str)>> =
    LazyLock::new(|| TABLE.iter().map(|(k, en, zh)| (*k, (*en, *zh))).collect());

/// The text of `key` in `lang`; the key itself when it is missing (a unit test forbids that).
pub fn tr(lang: Lang, key: &'static str) -> &'static str {
    match INDEX.get(key) {
        Some((en, zh)) => match lang {
            Lang::En => en,
            Lang::ZhCn => zh,
        },
        None => key,
    }
}

/// Key, English, Simplified Chinese.
static TABLE: &[(&str, &str, &str)] = &[
    ("nav.workflows", "Workflows", "工作流"),
    ("workflows.new", "New workflow", "新建工作流"),
    ("workflows.nodes", "Nodes", "节点"),
    ("workflows.node", "Node", "节点"),
    ("workflows.updated", "Updated", "更新时间"),
    (
        "workflows.timeout_s",
        "Workflow timeout (s, 0 = none)",
        "工作流超时（秒，0 表示不限）",
    ),
    (
        "workflows.definition",
        "Definition (YAML or JSON)",
        "定义（YAML 或 JSON）",
    ),
    (
        "workflows.definition_help",
        "nodes (key, job_id, params, timeout_s, join), edges (from, to, on: success | failure | always), params, schedule (type: none | cron | fixed_rate | once, expr, interval_s, at_ms, timezone), misfire, alert; group, name and policies are set above. Checked as you type.",
        "nodes（key、job_id、params、timeout_s、join）、edges（from、to、on：success | failure | always）、params、schedule（type：none | cron | fixed_rate | once，expr、interval_s、at_ms、timezone）、misfire、alert；分组、名称和策略在上方设置。输入时即时校验。",
    ),
    ("workflows.valid", "The definition is valid.", "定义有效。"),
    ("workflows.preview", "Graph preview", "流程图预览"),
    (
        "workflows.jobs_to_use",
        "Jobs you can use (job_id)",
        "可用的任务（job_id）",
    ),
    ("workflows.export", "Export", "导出"),
    ("workflows.import", "Import", "导入"),
    (
        "workflows.document",
        "Document (YAML or JSON)",
        "文档（YAML 或 JSON）",
    ),
    (
        "workflows.import_help",
        "A document exported from a workflow's page or the API. Its jobs and the workflow are matched by name in the group: updated if they exist, created otherwise, all or nothing.",
        "从工作流页面或 API 导出的文档。其中的任务和工作流按名称在分组内匹配：已存在则更新，否则新建，要么全部成功要么全部不变。",
    ),
    (
        "workflows.run_now",
        "Run the workflow now",
        "立即运行工作流",
    ),
    ("workflows.graph", "Graph", "流程图"),
    ("workflows.on_success", "on success", "成功时"),
    ("workflows.on_failure", "on failure", "失败时"),
    ("workflows.on_always", "always", "总是"),
    ("workflows.run", "Workflow run", "工作流运行"),
    ("workflows.pause", "Pause", "暂停"),
    ("workflows.resume", "Resume", "恢复"),
    ("workflows.rerun", "Re-run from failure", "从失败处重跑"),
    ("workflows.mark", "Mark node", "标记节点"),
    (
        "workflows.click_node",
        "click a node to open its run and log",
        "点击节点查看其运行与日志",
    ),
    ("workflows.outputs", "Outputs", "输出"),
    (
        "confirm.delete_workflow",
        "Delete this workflow? Its finished runs stay readable.",
        "确定删除该工作流？已结束的运行记录仍可查看。",
    ),
    (
        "confirm.cancel_workflow_run",
        "Cancel this workflow run? Running nodes are killed.",
        "确定取消该工作流运行？正在运行的节点将被终止。",
    ),
    ("status.paused", "paused", "已暂停"),
    ("status.cancelled", "cancelled", "已取消"),
    ("status.waiting", "waiting", "等待中"),
    ("status.ready", "ready", "就绪"),
    (
        "job.diff_to",
        "Changes from this version to",
        "从此版本到以下版本的变更",
    ),
    ("job.compare", "Compare", "对比"),
    ("alerts.any_kind", "Any kind", "全部类型"),
    ("alerts.attempts", "Attempts", "尝试次数"),
    ("alerts.channel", "Channel", "渠道"),
    ("alerts.channels", "Channels", "告警渠道"),
    ("alerts.events", "Alert events", "告警记录"),
    ("alerts.format", "Webhook format", "Webhook 格式"),
    ("alerts.kind", "Kind", "类型"),
    ("alerts.last_error", "Last error", "最后错误"),
    ("alerts.new_channel", "New channel", "新建渠道"),
    (
        "alerts.secret",
        "Secret (signing key; optional)",
        "密钥（签名用，可选）",
    ),
    (
        "alerts.secret_clear",
        "Remove the stored secret",
        "清除已保存的密钥",
    ),
    (
        "alerts.secret_keep",
        "unchanged unless you type a new one",
        "不填写则保持不变",
    ),
    ("alerts.send_test", "Send test", "发送测试"),
    ("alerts.target", "Target", "目标"),
    (
        "alerts.target_help",
        "Webhook URL, or email recipients separated by commas",
        "Webhook 地址，或以逗号分隔的收件人邮箱",
    ),
    ("alerts.title", "Title", "标题"),
    (
        "confirm.delete_channel",
        "Delete this channel? Jobs stop using it.",
        "确定删除该渠道？任务将不再使用它。",
    ),
    ("flash.test_failed", "The test failed:", "测试发送失败："),
    ("flash.test_sent", "Test message sent.", "测试消息已发送。"),
    (
        "account.all_groups",
        "all groups (admin)",
        "全部执行器（管理员）",
    ),
    ("account.change_password", "Change password", "修改密码"),
    ("account.lang_auto", "As the browser says", "跟随浏览器"),
    ("account.language", "Language", "语言"),
    ("action.all", "all", "全部"),
    ("action.cancel", "Cancel", "取消"),
    ("action.copy", "Copy", "复制"),
    ("action.apply", "Apply", "执行"),
    ("action.delete", "Delete", "删除"),
    ("action.disable", "Disable", "停用"),
    ("action.edit", "Edit", "编辑"),
    ("action.enable", "Enable", "启用"),
    ("action.filter", "Filter", "筛选"),
    ("action.kill", "Kill", "终止"),
    ("action.next", "Next", "下一页"),
    ("action.prev", "Previous", "上一页"),
    ("action.retry", "Retry", "重试"),
    ("action.save", "Save", "保存"),
    ("action.trigger", "Trigger", "执行"),
    ("agents.approve", "Approve", "批准"),
    ("agents.dead", "dead", "离线"),
    ("agents.drain", "Drain", "暂停派发"),
    ("agents.drained", "drained since", "已暂停派发，自"),
    ("agents.executor", "XXL-Job executor", "XXL-Job 执行器"),
    ("agents.forget", "Forget", "移除"),
    ("agents.pending", "waiting for approval", "待批准"),
    ("agents.revoke", "Revoke", "吊销"),
    ("agents.revoked", "revoked", "已吊销"),
    ("agents.undrain", "Undrain", "恢复派发"),
    ("agents.run_as", "jobs run as", "任务运行用户"),
    (
        "agents.runs_as_root",
        "jobs run as root",
        "任务以 root 运行",
    ),
    ("agents.host", "Host", "主机"),
    ("agents.last_heartbeat", "Last heartbeat", "最后心跳"),
    ("agents.live", "live", "在线"),
    ("agents.metrics", "Metrics", "指标"),
    ("agents.running", "Running runs", "运行中的任务"),
    ("agents.mode", "mode", "模式"),
    ("agents.connected_to", "connected to", "已连接到"),
    ("agents.since", "since", "自"),
    ("agents.rtt", "round trip", "往返时间"),
    ("agents.approval", "Approval", "审批状态"),
    ("agents.approved", "approved", "已批准"),
    ("agents.any_approval", "Any approval", "全部审批状态"),
    ("agents.any_mode", "Any mode", "全部模式"),
    ("agents.version", "Version", "版本"),
    ("agents.registered", "Registered", "注册时间"),
    ("agents.label_filter", "label: key=value", "标签：key=value"),
    ("agents.search", "Address or host", "地址或主机"),
    ("agents.sort", "Sort", "排序"),
    ("agents.desc", "Largest first", "降序"),
    ("fleet.title", "Fleet", "集群概览"),
    ("fleet.by_group", "Agents by group", "各执行器组节点"),
    ("fleet.drained", "drained", "已暂停派发"),
    ("fleet.total", "Total", "合计"),
    ("fleet.versions", "Versions in use", "在用版本"),
    ("fleet.modes", "Connection modes", "连接模式"),
    ("fleet.limits_modes", "Limits modes", "资源限制方式"),
    ("fleet.not_said", "not reported", "未上报"),
    ("fleet.died", "Died in the last hour", "最近一小时离线"),
    ("fleet.died_hour", "died in the last hour", "最近一小时离线"),
    (
        "fleet.none_died",
        "No agent died in the last hour.",
        "最近一小时没有节点离线。",
    ),
    ("fleet.all_dead", "All dead agents", "全部离线节点"),
    ("alert.channels", "Channels", "告警渠道"),
    (
        "alert.no_channels",
        "No alert channels yet; an admin adds them under Alerts.",
        "还没有告警渠道；管理员可在“告警”中添加。",
    ),
    (
        "alert.on_failure",
        "Alert on final failure",
        "最终失败时告警",
    ),
    (
        "alert.on_lost",
        "Alert when a run is lost",
        "任务丢失时告警",
    ),
    (
        "alert.on_no_agent",
        "Alert when the group loses its last live agent",
        "执行器组失去最后一个在线节点时告警",
    ),
    ("alert.on_timeout", "Alert on timeout", "超时告警"),
    ("audit.action", "Action", "操作"),
    ("audit.actor", "Who", "操作人"),
    ("audit.changes", "Changes", "变更"),
    ("audit.fields_changed", "fields changed", "个字段有变更"),
    ("audit.from", "From", "来源"),
    ("audit.object", "Object", "对象"),
    ("audit.object_id", "Object id", "对象 ID"),
    ("audit.object_type", "Object type", "对象类型"),
    (
        "confirm.delete_group",
        "Delete this group?",
        "确定删除该执行器组？",
    ),
    (
        "confirm.delete_job",
        "Delete this job? Its runs are kept.",
        "确定删除该任务？其运行记录会保留。",
    ),
    (
        "confirm.forget_agent",
        "Forget this agent? Its key goes with it: it may enroll again.",
        "确定移除该代理？其密钥一并删除，之后可重新注册。",
    ),
    (
        "confirm.revoke_agent",
        "Revoke this agent? It gets no more runs and its calls are refused.",
        "确定吊销该代理？它将不再接收任务，其请求会被拒绝。",
    ),
    ("confirm.kill", "Kill this run?", "确定终止该运行？"),
    (
        "confirm.revoke",
        "Revoke this token? Programs using it stop working at once.",
        "确定吊销该令牌？使用它的程序将立即失效。",
    ),
    (
        "confirm.rollback",
        "Make this version current again?",
        "将此版本恢复为当前版本？",
    ),
    ("dash.agents_live", "agents live", "在线节点"),
    ("dash.chart", "Last 7 days", "最近 7 天"),
    (
        "dash.failures",
        "failed, timed out or lost",
        "失败、超时或丢失",
    ),
    ("dash.in_flight", "runs in flight", "运行中"),
    ("dash.jobs_enabled", "jobs enabled", "已启用任务"),
    ("dash.no_failures", "No failures. Good.", "没有失败记录。"),
    ("dash.recent_failures", "Recent failures", "最近失败"),
    ("error.agent", "Agent unreachable", "执行器不可达"),
    ("error.conflict", "Conflict", "冲突"),
    ("error.forbidden", "Not allowed", "无权操作"),
    ("error.internal", "Something went wrong", "出错了"),
    ("error.invalid", "Invalid input", "输入有误"),
    ("error.not_found", "Not found", "未找到"),
    ("error.rate_limited", "Too many attempts", "尝试次数过多"),
    ("error.request_id", "Request id", "请求 ID"),
    ("error.unavailable", "Temporarily unavailable", "暂时不可用"),
    ("field.address", "Address", "地址"),
    ("field.address_mode", "Address mode", "注册方式"),
    (
        "field.addresses",
        "Agent addresses (manual mode, one per line)",
        "执行器地址（手动录入，每行一个）",
    ),
    ("field.agent", "Agent", "执行器"),
    (
        "field.agent_labels",
        "Agent labels required",
        "要求的执行器标签",
    ),
    ("field.app_name", "App name", "AppName"),
    (
        "field.at",
        "At (in the time zone below)",
        "执行时间（按下方时区）",
    ),
    ("field.attempt", "Attempt", "第几次尝试"),
    (
        "field.bean",
        "Handler name (XXL-Job bean)",
        "JobHandler 名称",
    ),
    ("field.block_strategy", "Block strategy", "阻塞处理策略"),
    ("field.by", "By", "操作人"),
    ("field.children", "Child jobs (ids)", "子任务 ID"),
    ("field.command", "Command", "命令"),
    ("field.concurrency", "Concurrency", "并发策略"),
    ("field.cron", "Cron expression", "Cron 表达式"),
    ("field.current_password", "Current password", "当前密码"),
    ("field.description", "Description", "描述"),
    ("field.duration", "Duration", "耗时"),
    ("field.exit_code", "Exit code", "退出码"),
    ("field.finished", "Finished", "结束时间"),
    ("field.group", "Group", "执行器组"),
    ("field.groups", "Groups", "执行器组"),
    ("field.handle_result", "Handle result", "执行结果"),
    ("field.handler", "Handler", "运行模式"),
    ("field.handler_type", "Handler type", "运行模式"),
    ("field.http_body", "Request body", "请求体"),
    (
        "field.http_headers",
        "Headers (one Name: value per line)",
        "请求头（每行一个 名称: 值）",
    ),
    ("field.http_method", "Method", "请求方法"),
    (
        "field.http_statuses",
        "Success statuses (e.g. 200-299,304)",
        "成功状态码（如 200-299,304）",
    ),
    (
        "field.http_timeout_ms",
        "Answer timeout (ms, empty = the job's timeout)",
        "响应超时（毫秒，留空则用任务超时）",
    ),
    ("field.http_url", "URL", "请求地址"),
    ("field.interpreter", "Interpreter", "解释器"),
    ("field.interval_s", "Every (seconds)", "间隔（秒）"),
    ("field.job", "Job", "任务"),
    ("field.job_id", "Job id", "任务 ID"),
    ("field.limit_cpu", "CPU limit (cores)", "CPU 限制（核）"),
    (
        "field.limit_memory_mb",
        "Memory limit (MB)",
        "内存限制（MB）",
    ),
    ("field.limit_pids", "Process limit", "进程数限制"),
    ("field.message", "Message", "信息"),
    ("field.misfire", "Misfire policy", "调度过期策略"),
    ("field.name", "Name", "名称"),
    ("field.new_password", "New password", "新密码"),
    ("field.next_fire", "Next fire", "下次触发"),
    ("field.params", "Parameters", "任务参数"),
    ("field.password", "Password", "密码"),
    (
        "field.retry_backoff_s",
        "Retry backoff (seconds)",
        "重试间隔（秒）",
    ),
    ("field.retry_count", "Retries", "失败重试次数"),
    ("field.role", "Role", "角色"),
    ("field.routing", "Routing", "路由策略"),
    ("field.run", "Run", "运行"),
    ("field.schedule", "Schedule", "调度"),
    ("field.schedule_type", "Schedule type", "调度类型"),
    ("field.scheduled", "Scheduled", "计划时间"),
    ("field.shard", "Shard", "分片"),
    ("field.source", "Script", "脚本"),
    ("field.started", "Started", "开始时间"),
    ("field.status", "Status", "状态"),
    (
        "field.timeout_s",
        "Timeout (seconds, 0 = none)",
        "超时时间（秒，0 为不限）",
    ),
    ("field.timezone", "Time zone", "时区"),
    ("field.tags", "Tags", "标签"),
    (
        "field.start_deadline_s",
        "Starting deadline (s)",
        "启动截止时间（秒）",
    ),
    (
        "field.keep_succeeded",
        "Succeeded runs kept",
        "保留的成功记录数",
    ),
    ("field.keep_failed", "Failed runs kept", "保留的失败记录数"),
    ("hint.admin_default", "admin default", "使用全局设置"),
    ("hint.keep_all", "all", "全部"),
    ("field.title", "Title", "名称"),
    ("field.trigger_kind", "Trigger", "触发方式"),
    ("field.trigger_result", "Trigger result", "调度结果"),
    ("field.triggered", "Triggered", "调度时间"),
    ("field.usage", "Usage", "资源用量"),
    ("field.username", "User name", "用户名"),
    ("field.version", "Version", "版本"),
    ("field.version_note", "Version note", "版本备注"),
    ("field.when", "When", "时间"),
    ("filter.all_groups", "All groups", "全部执行器组"),
    ("filter.any_schedule", "Any schedule", "全部调度类型"),
    ("filter.any_status", "Any status", "全部状态"),
    ("filter.from", "From", "从"),
    ("filter.to", "To", "到"),
    ("flash.deleted", "Deleted.", "已删除。"),
    ("bulk.done", "Jobs done:", "已处理任务："),
    (
        "confirm.bulk_delete",
        "Delete every ticked job?",
        "删除所有勾选的任务？",
    ),
    ("bulk.refused", "refused for", "被拒绝："),
    ("bulk.none_chosen", "Tick the jobs first.", "请先勾选任务。"),
    ("bulk.no_action", "Choose an action.", "请选择操作。"),
    ("bulk.with_selected", "With the ticked jobs", "对勾选的任务"),
    ("bulk.select_all", "Tick all on this page", "全选本页"),
    ("jobs.tag_filter", "Tag", "标签"),
    ("flash.disabled", "Job disabled.", "任务已停用。"),
    ("flash.enabled", "Job enabled.", "任务已启用。"),
    (
        "flash.kill_sent",
        "Kill sent to the agent.",
        "已向执行器发送终止请求。",
    ),
    (
        "flash.password_changed",
        "Password changed; log in with the new one.",
        "密码已修改，请用新密码登录。",
    ),
    ("flash.password_reset", "Password reset.", "密码已重置。"),
    (
        "flash.retried",
        "Retried as the next attempt.",
        "已作为下一次尝试重试。",
    ),
    ("flash.revoked", "Token revoked.", "令牌已吊销。"),
    ("flash.rolled_back", "Script rolled back.", "脚本已回滚。"),
    ("flash.saved", "Saved.", "已保存。"),
    ("flash.triggered", "Triggered.", "已触发执行。"),
    ("groups.auto", "automatic (agents register)", "自动注册"),
    (
        "groups.allow_executors",
        "Allow XXL-Job executors (no agent key: the shared token is all they show)",
        "允许 XXL-Job 执行器（无代理密钥，仅凭共享令牌）",
    ),
    ("groups.manual", "manual addresses", "手动录入"),
    ("groups.new", "New group", "新建执行器组"),
    ("job.alerts", "Alerts", "告警"),
    ("job.basics", "Basics", "基础配置"),
    (
        "job.by_routing",
        "any, by the routing strategy",
        "按路由策略选择",
    ),
    ("job.current", "current", "当前"),
    ("job.execution", "Execution", "执行配置"),
    ("job.next_fires", "Next fire times", "接下来的触发时间"),
    ("job.recent_runs", "Recent runs", "最近运行"),
    ("job.rollback_to", "Roll back to", "回滚到"),
    ("job.trigger_once", "Trigger once", "执行一次"),
    ("job.versions", "Script versions", "脚本版本"),
    ("job.view_diff", "view and diff", "查看与对比"),
    ("jobs.copy_of", "Copy of", "复制自"),
    ("jobs.disabled", "disabled", "已停用"),
    ("jobs.enabled", "enabled", "已启用"),
    ("jobs.new", "New job", "新建任务"),
    ("jobs.search", "Search by name", "按名称搜索"),
    ("list.empty", "Nothing here yet.", "暂无数据。"),
    (
        "login.busy",
        "The server is busy; try again in a moment.",
        "服务器繁忙，请稍后再试。",
    ),
    (
        "login.failed",
        "Wrong user name or password.",
        "用户名或密码错误。",
    ),
    (
        "login.missing",
        "Enter your user name and password.",
        "请输入用户名和密码。",
    ),
    (
        "login.rate_limited",
        "Too many failed attempts; wait a few minutes and try again.",
        "失败次数过多，请几分钟后再试。",
    ),
    (
        "login.stale",
        "The login form expired; please try again.",
        "登录表单已过期，请重试。",
    ),
    ("login.submit", "Log in", "登录"),
    ("login.title", "Log in", "登录"),
    (
        "login.too_large",
        "The login form was too large to be a user name and password.",
        "登录表单过大，不可能是用户名和密码。",
    ),
    (
        "login.too_long",
        "User names are at most 64 bytes and passwords at most 256.",
        "用户名最长 64 字节，密码最长 256 字节。",
    ),
    ("nav.account", "Account", "账户"),
    ("nav.agents", "Agents", "执行器"),
    ("nav.fleet", "Fleet", "集群概览"),
    ("nav.alerts", "Alerts", "告警"),
    ("nav.audit", "Audit log", "审计日志"),
    ("nav.dashboard", "Dashboard", "运行报表"),
    ("nav.groups", "Groups", "执行器组"),
    ("nav.jobs", "Jobs", "任务管理"),
    ("nav.logout", "Log out", "退出"),
    ("nav.runs", "Runs", "调度日志"),
    ("nav.tokens", "API tokens", "API 令牌"),
    ("nav.users", "Users", "用户管理"),
    ("nav.reports", "Reports", "统计报表"),
    ("reports.by_day", "Runs per day by outcome", "每日运行结果"),
    ("reports.csv", "Download CSV", "下载 CSV"),
    (
        "reports.days_utc",
        "Days are UTC; a run counts on the day it was created.",
        "日期均为 UTC；运行记录按创建日期统计。",
    ),
    ("reports.failures", "Failures", "失败次数"),
    ("reports.in_flight", "in flight", "进行中"),
    (
        "reports.most_failing",
        "Most failing jobs",
        "失败最多的任务",
    ),
    (
        "reports.no_runs",
        "No runs in this range.",
        "该时间范围内没有运行记录。",
    ),
    ("reports.oldest", "Reports go back to", "报表最早可查到"),
    ("reports.p50", "p50 duration", "p50 耗时"),
    ("reports.p95", "p95 duration", "p95 耗时"),
    ("reports.per_group", "Per group", "按执行器组"),
    ("reports.per_job", "Per job", "按任务"),
    (
        "reports.precision",
        "Success rate = succeeded / (succeeded + failed + timed out + lost). Durations are of runs that started and finished, within 12.5 % (exact below 8 ms).",
        "成功率 = 成功 / (成功 + 失败 + 超时 + 丢失)。耗时只统计已开始并已结束的运行，误差不超过 12.5%（8 毫秒以下精确）。",
    ),
    ("reports.runs", "Runs", "运行次数"),
    ("reports.success_rate", "Success rate", "成功率"),
    ("reports.updated", "Counted", "统计于"),
    ("role.admin", "admin", "管理员"),
    ("role.operator", "operator", "操作员"),
    ("role.viewer", "viewer", "只读"),
    ("run.attempts", "Attempts", "重试链"),
    ("run.log", "Log", "执行日志"),
    ("run.log_loading", "Loading the log…", "正在加载日志…"),
    ("runs.times_utc", "Times are UTC.", "时间均为 UTC。"),
    ("status.failed", "failed", "失败"),
    ("status.killed", "killed", "已终止"),
    ("status.lost", "lost", "丢失"),
    ("status.pending", "pending", "等待中"),
    ("status.running", "running", "运行中"),
    ("status.skipped", "skipped", "已跳过"),
    ("status.succeeded", "succeeded", "成功"),
    ("status.timed_out", "timed out", "超时"),
    ("tokens.create", "Create token", "创建令牌"),
    ("tokens.expires", "Expires", "过期时间"),
    (
        "tokens.expires_in_days",
        "Expires in (days)",
        "有效期（天）",
    ),
    ("tokens.last_used", "Last used", "最后使用"),
    ("tokens.never", "never", "永不"),
    ("tokens.owner", "Owner", "所有者"),
    ("tokens.prefix", "Prefix", "前缀"),
    ("tokens.revoke", "Revoke", "吊销"),
    ("tokens.revoked", "revoked", "已吊销"),
    (
        "tokens.shown_once",
        "Copy this token now: it is shown only once.",
        "请立即复制此令牌：它只显示这一次。",
    ),
    ("users.active", "active", "正常"),
    ("users.disabled", "disabled", "已禁用"),
    ("users.new", "New user", "新建用户"),
    ("users.reset_password", "Reset password", "重置密码"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_browser_language_decides_by_quality() {
        assert_eq!(from_accept_language("zh-CN,zh;q=0.9,en;q=0.8"), Lang::ZhCn);
        assert_eq!(from_accept_language("en-US,en;q=0.9,zh;q=0.8"), Lang::En);
        assert_eq!(from_accept_language("de-DE,zh-TW;q=0.5"), Lang::ZhCn);
        assert_eq!(
            from_accept_language("fr;q=1, en;q=0.1, zh;q=0.5"),
            Lang::ZhCn
        );
        assert_eq!(from_accept_language("de"), Lang::En);
        assert_eq!(from_accept_language(""), Lang::En);
        assert_eq!(from_accept_language("zh;q=0, en"), Lang::En);
    }

    #[test]
    fn keys_are_unique_and_translated() {
        let mut seen = std::collections::HashSet::new();
        for (key, en, zh) in TABLE {
            assert!(seen.insert(*key), "duplicate key {key}");
            assert!(
                !en.is_empty() && !zh.is_empty(),
                "{key} lacks a translation"
            );
        }
    }

    /// Every `c.t("…")` in a template and every `.t("…")` / `tr(lang, "…")` in the console's
    /// code must be in the table.
    #[test]
    fn every_key_used_is_in_the_table() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut sources = Vec::new();
        for dir in ["templates", "templates/partials", "admin/src/web"] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                let path = entry.unwrap().path();
                if path.is_file() {
                    sources.push(std::fs::read_to_string(&path).unwrap());
                }
            }
        }
        let mut missing = Vec::new();
        for text in &sources {
            for marker in [".t(\"", "tr(lang, \""] {
                for piece in text.split(marker).skip(1) {
                    let key = piece.split('"').next().unwrap();
                    if key.contains('.') && !INDEX.contains_key(key) && !key.contains(' ') {
                        missing.push(key.to_owned());
                    }
                }
            }
        }
        missing.sort();
        missing.dedup();
        assert!(missing.is_empty(), "keys without text: {missing:?}");
    }
}
