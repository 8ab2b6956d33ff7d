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
import java.util.List;
import org.apache.kafka.common.utils.Exit;

/**
 * Runs Kafka's command-line tools one after another in one JVM, so a test pays the JVM's
 * start-up once. Each stdin line is a JSON object {"main": class, "args": [...], "stdin": text};
 * each answer is one JSON line {"code": exit code, "out": stdout, "err": stderr} on the real
 * stdout (marked "toolRunner": a tool's thread may write there too). A tool's Exit.exit or Exit.halt ends only that run: its first call's code is the
 * answer's code, even where the tool catches the exception that unwinds it and exits again.
 */
public final class ToolRunner {
    static final class ToolExit extends RuntimeException {
        final int code;

        ToolExit(int code) {
            super(null, null, false, false);
            this.code = code;
        }
    }

    static Integer firstExit;

    static ToolExit exit(int code) {
        if (firstExit == null) {
            firstExit = code;
        }
        return new ToolExit(code);
    }

    public static void main(String[] argv) throws Exception {
        ObjectMapper json = new ObjectMapper();
        PrintStream realOut = System.out;
        PrintStream realErr = System.err;
        InputStream realIn = System.in;
        Exit.setExitProcedure((code, message) -> { throw exit(code); });
        Exit.setHaltProcedure((code, message) -> { throw exit(code); });
        BufferedReader lines = new BufferedReader(new InputStreamReader(realIn, StandardCharsets.UTF_8));
        String line;
        while ((line = lines.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            JsonNode command = json.readTree(line);
            List<String> args = new ArrayList<>();
            command.path("args").forEach(a -> args.add(a.asText()));
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            PrintStream toolOut = new PrintStream(out, true, StandardCharsets.UTF_8);
            PrintStream toolErr = new PrintStream(err, true, StandardCharsets.UTF_8);
            System.setOut(toolOut);
            System.setErr(toolErr);
            System.setIn(new ByteArrayInputStream(
                command.path("stdin").asText("").getBytes(StandardCharsets.UTF_8)));
            int code = 0;
            firstExit = null;
            try {
                Method main = Class.forName(command.path("main").asText()).getMethod("main", String[].class);
                main.invoke(null, (Object) args.toArray(new String[0]));
            } catch (InvocationTargetException e) {
                Throwable cause = e.getCause();
                if (cause instanceof ToolExit) {
                    code = ((ToolExit) cause).code;
                } else {
                    cause.printStackTrace(toolErr);
                    code = 255;
                }
            } catch (ToolExit e) {
                code = e.code;
            } catch (Throwable t) {
                t.printStackTrace(toolErr);
                code = 254;
            } finally {
                toolOut.flush();
                toolErr.flush();
                System.setOut(realOut);
                System.setErr(realErr);
                System.setIn(realIn);
            }
            if (firstExit != null) {
                code = firstExit;
            }
            ObjectNode answer = json.createObjectNode();
            answer.put("toolRunner", true);
            answer.put("code", code);
            answer.put("out", out.toString(StandardCharsets.UTF_8));
            answer.put("err", err.toString(StandardCharsets.UTF_8));
            realOut.println(json.writeValueAsString(answer));
            realOut.flush();
        }
    }
}
