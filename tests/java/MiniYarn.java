import java.io.FileOutputStream;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

/**
 * A real YARN for the tests: Hadoop's own ResourceManager and NodeManagers (MiniYARNCluster) in one JVM,
 * launching real container processes. Hadoop's cluster manager cannot start it from the minicluster jar
 * (its MapReduce part needs classes the jar lacks), hence this main.
 *
 * <p>Arguments: the configuration folder to write (a client's HADOOP_CONF_DIR), the default filesystem
 * (the tests' HDFS, where Spark stages its application), the memory (MB) and vcores each NodeManager
 * advertises, and the number of NodeManagers. The folder gets core-site.xml and yarn-site.xml once every
 * NodeManager has registered, then a file named "ready"; the cluster runs until the process ends.
 */
public final class MiniYarn {
    private MiniYarn() {}

    public static void main(String[] args) throws Exception {
        Path confDir = Path.of(args[0]);
        String defaultFs = args[1];
        int memoryMb = Integer.parseInt(args[2]);
        int vcores = Integer.parseInt(args[3]);
        int nodeManagers = Integer.parseInt(args[4]);

        YarnConfiguration conf = new YarnConfiguration();
        conf.set("fs.defaultFS", defaultFs);
        conf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_FIXED_PORTS, false);
        // The defaults (8 GB and 8 vcores per NodeManager) promise more than a small machine has.
        conf.setInt(YarnConfiguration.NM_PMEM_MB, memoryMb);
        conf.setInt(YarnConfiguration.NM_VCORES, vcores);
        conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 128);
        conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, memoryMb);
        conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_VCORES, vcores);
        // A JVM's virtual size is far above its heap; YARN's memory checks would kill healthy executors.
        conf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false);
        conf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
        // A nearly full disk must not mark the only NodeManager unhealthy.
        conf.setFloat(YarnConfiguration.NM_MAX_PER_DISK_UTILIZATION_PERCENTAGE, 100.0f);
        // One queue, "default", as a fresh cluster's capacity-scheduler.xml has (the jar carries none).
        conf.set("yarn.scheduler.capacity.root.queues", "default");
        conf.setFloat("yarn.scheduler.capacity.root.default.capacity", 100.0f);
        // The capacity scheduler's default (a tenth of the queue for application masters) would keep a
        // second application waiting on a small NodeManager.
        conf.setFloat("yarn.scheduler.capacity.maximum-am-resource-percent", 0.5f);
        // Container logs stay after an application ends, for a test to read.
        conf.setInt(YarnConfiguration.DEBUG_NM_DELETE_DELAY_SEC, 600);

        MiniYARNCluster cluster = new MiniYARNCluster("kde-yarn", nodeManagers, 1, 1);
        cluster.init(conf);
        cluster.start();
        Runtime.getRuntime().addShutdownHook(new Thread(cluster::stop));
        if (!cluster.waitForNodeManagersToConnect(120_000)) {
            throw new IllegalStateException("the NodeManagers did not register with the ResourceManager");
        }

        Configuration started = cluster.getConfig();
        Files.createDirectories(confDir);
        Configuration core = new Configuration(false);
        core.set("fs.defaultFS", defaultFs);
        write(core, confDir.resolve("core-site.xml"));
        write(started, confDir.resolve("yarn-site.xml"));
        Files.writeString(confDir.resolve("ready"), started.get(YarnConfiguration.RM_WEBAPP_ADDRESS) + "\n");
        Thread.currentThread().join();
    }

    private static void write(Configuration conf, Path file) throws Exception {
        Path partial = file.resolveSibling(file.getFileName() + ".partial");
        try (OutputStream out = new FileOutputStream(partial.toFile())) {
            conf.writeXml(out);
        }
        Files.move(partial, file);
    }
}
