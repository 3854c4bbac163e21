// Runs Apache Kafka's command-line tools one after another in one JVM, for
// tests/kafka_tools.py (the runbook test and the tool tests): a JVM start per tool run would cost seconds each.
//
// Each line on stdin is a JSON request {"class": main class, "args": [...], "stdin": text,
// "timeout_ms": n}; the answer, one JSON line on stdout, is {"rc": exit code, "out": what the tool
// printed on System.out, "err": what it printed on System.err}. The tool's main runs in a thread of
// its own with System.out, System.err and System.in replaced; Kafka's Exit.exit and Exit.halt
// record the code and park that thread for good (throwing would land in the tools' catch blocks
// and change what they print); the shutdown hooks a tool registers run once it has exited. rc is -1 when main returned
// without calling Exit.exit (as `java` would exit 0 then, unless non-daemon threads hold it) and
// -2 when the tool was still running after timeout_ms. Log4j writes to the JVM's real stderr.

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.locks.LockSupport;
import org.apache.kafka.common.utils.internals.Exit;

public class ToolRunner {
    /** One tool run: how it ended, and the shutdown hooks it registered. */
    private static final class Run {
        final CompletableFuture<Integer> exited = new CompletableFuture<>();
        final List<Runnable> hooks = Collections.synchronizedList(new ArrayList<>());
    }

    // The run a thread belongs to, inherited by the threads a tool starts: Exit.exit in a
    // leftover thread of an earlier tool completes that tool's run, not the current one.
    private static final InheritableThreadLocal<Run> RUN = new InheritableThreadLocal<>();

    private static void exitProcedure(int code, String message) {
        Run run = RUN.get();
        if (run != null) {
            run.exited.complete(code);
        }
        while (true) {
            LockSupport.park();
        }
    }

    public static void main(String[] argv) throws Exception {
        PrintStream realOut = System.out;
        PrintStream realErr = System.err;
        InputStream realIn = System.in;
        ObjectMapper json = new ObjectMapper();
        Exit.setExitProcedure(ToolRunner::exitProcedure);
        Exit.setHaltProcedure(ToolRunner::exitProcedure);
        // The hooks run when the tool has exited, as the JVM would run them: ConsoleProducer
        // closes (flushes) its producer in one.
        Exit.setShutdownHookAdder((name, runnable) -> {
            Run run = RUN.get();
            if (run != null) {
                run.hooks.add(runnable);
            }
        });
        BufferedReader requests = new BufferedReader(new InputStreamReader(realIn, StandardCharsets.UTF_8));
        String line;
        while ((line = requests.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            JsonNode request = json.readTree(line);
            List<String> args = new ArrayList<>();
            request.get("args").forEach(a -> args.add(a.asText()));
            String stdin = request.has("stdin") ? request.get("stdin").asText() : "";
            long timeoutMs = request.has("timeout_ms") ? request.get("timeout_ms").asLong() : 120_000L;
            Method toolMain = Class.forName(request.get("class").asText()).getMethod("main", String[].class);

            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            PrintStream toolOut = new PrintStream(out, true, StandardCharsets.UTF_8);
            PrintStream toolErr = new PrintStream(err, true, StandardCharsets.UTF_8);
            Run run = new Run();
            CompletableFuture<Integer> done = run.exited;
            Thread tool = new Thread(() -> {
                RUN.set(run);
                try {
                    toolMain.invoke(null, (Object) args.toArray(new String[0]));
                    done.complete(-1);
                } catch (InvocationTargetException e) {
                    // What the JVM prints for an exception out of main, and its exit code.
                    e.getCause().printStackTrace(toolErr);
                    done.complete(1);
                } catch (Throwable e) {
                    e.printStackTrace(toolErr);
                    done.complete(1);
                }
            }, "tool-" + request.get("class").asText());
            tool.setDaemon(true);
            System.setOut(toolOut);
            System.setErr(toolErr);
            System.setIn(new ByteArrayInputStream(stdin.getBytes(StandardCharsets.UTF_8)));
            int rc;
            tool.start();
            try {
                rc = done.get(timeoutMs, TimeUnit.MILLISECONDS);
            } catch (TimeoutException e) {
                tool.interrupt();
                rc = -2;
            }
            List<Thread> hooks = new ArrayList<>();
            for (Runnable hook : new ArrayList<>(run.hooks)) {
                Thread t = new Thread(() -> {
                    try {
                        hook.run();
                    } catch (Throwable e) {
                        e.printStackTrace(toolErr);
                    }
                }, "shutdown-hook");
                t.setDaemon(true);
                t.start();
                hooks.add(t);
            }
            for (Thread t : hooks) {
                t.join(timeoutMs);
            }
            System.setOut(realOut);
            System.setErr(realErr);
            System.setIn(realIn);
            toolOut.flush();
            toolErr.flush();
            ObjectNode answer = json.createObjectNode();
            answer.put("rc", rc);
            answer.put("out", out.toString(StandardCharsets.UTF_8));
            answer.put("err", err.toString(StandardCharsets.UTF_8));
            realOut.println(json.writeValueAsString(answer));
            realOut.flush();
        }
    }
}
