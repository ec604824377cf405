import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.net.URL;
import java.net.URLClassLoader;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Enumeration;
import java.util.List;

/**
 * Runs Beam's Flink job server with the jars of the folder jars/ beside this launcher's jar.
 *
 * <p>Beam's job server stages its class path with every job, as Beam's class path scanner finds
 * it: 155 MB uploaded to the JobManager per Beam stage, 13-15 s on a busy 2-core machine. The
 * TaskManagers of the local cluster load the same jars from their own class path (parent-first),
 * so here the job server's classes are defined by a class loader that exposes no URLs: the scanner
 * then finds only this launcher's jar, and that is all a job stages.
 */
public final class JobServerLauncher {
  private static final String MAIN = "org.apache.beam.runners.flink.FlinkJobServerDriver";

  private JobServerLauncher() {}

  public static void main(String[] args) throws Exception {
    File self =
        new File(JobServerLauncher.class.getProtectionDomain().getCodeSource().getLocation().toURI());
    File[] jars = new File(self.getParentFile(), "jars").listFiles((dir, n) -> n.endsWith(".jar"));
    if (jars == null || jars.length == 0) {
      throw new IllegalStateException("no jars beside " + self + ": fetch the cluster again");
    }
    Arrays.sort(jars);
    List<URL> urls = new ArrayList<>();
    for (File jar : jars) {
      urls.add(jar.toURI().toURL());
    }
    ClassLoader parent = ClassLoader.getPlatformClassLoader();
    ClassLoader loader = new Opaque(new URLClassLoader(urls.toArray(new URL[0]), parent), parent);
    Thread.currentThread().setContextClassLoader(loader);
    Class.forName(MAIN, true, loader).getMethod("main", String[].class).invoke(null, (Object) args);
  }

  /** Defines the jars' classes itself (a URLClassLoader would show the scanner its URLs). */
  private static final class Opaque extends ClassLoader {
    static {
      registerAsParallelCapable();
    }

    private final URLClassLoader source;

    Opaque(URLClassLoader source, ClassLoader parent) {
      super(parent);
      this.source = source;
    }

    @Override
    protected Class<?> findClass(String name) throws ClassNotFoundException {
      String path = name.replace('.', '/') + ".class";
      try (InputStream in = source.getResourceAsStream(path)) {
        if (in == null) {
          throw new ClassNotFoundException(name);
        }
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        in.transferTo(bytes);
        int dot = name.lastIndexOf('.');
        if (dot > 0 && getDefinedPackage(name.substring(0, dot)) == null) {
          try {
            definePackage(name.substring(0, dot), null, null, null, null, null, null, null);
          } catch (IllegalArgumentException alreadyDefined) {
            // Another thread defined it first.
          }
        }
        return defineClass(name, bytes.toByteArray(), 0, bytes.size());
      } catch (IOException e) {
        throw new ClassNotFoundException(name, e);
      }
    }

    @Override
    protected URL findResource(String name) {
      return source.getResource(name);
    }

    @Override
    protected Enumeration<URL> findResources(String name) throws IOException {
      return source.getResources(name);
    }
  }
}
